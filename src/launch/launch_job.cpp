#include "launch/launch_job.h"

#include <signal.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <map>

#include "comm/exit_notice.h"
#include "launch/duty_cycle.h"
#include "launch/fault_injector.h"
#include "launch/launch_summary.h"
#include "launch/output_relay.h"
#include "launch/replacement.h"
#include "launch/step_report.h"
#include "launch/store_channel.h"
#include "launch/worker_process.h"

namespace ntp::launch {
namespace {

using Clock = std::chrono::steady_clock;

// How long the end of the job waits for the workers' end-of-job reports: past the redis store's
// default outage bound (10 s), so that a store that comes back in time is heard.
constexpr std::chrono::seconds kEndReportWait{15};
// Members of reaped groups that are not the launcher's descendants cannot be reaped; after this
// the launcher says so and returns.
constexpr std::chrono::seconds kGroupWait{10};
// The cause of a lost worker that a signal not the launcher's stopped.
constexpr const char* kStoppedCause = "stopped by a signal";

std::vector<FaultSpec> local_faults(const std::vector<FaultSpec>& faults,
                                    const std::vector<int>& ranks) {
  std::vector<FaultSpec> mine;
  for (const FaultSpec& fault : faults) {
    // A fault point goes to every node's workers: the one it names (a rank, or a role any
    // worker may hold) finds itself.
    if (fault.kind == FaultKind::kPoint ||
        std::find(ranks.begin(), ranks.end(), fault.rank) != ranks.end()) {
      mine.push_back(fault);
    }
  }
  return mine;
}

class LaunchJob {
 public:
  LaunchJob(LaunchSetup setup, const volatile std::sig_atomic_t& stop_signal)
      : setup_(std::move(setup)),
        options_(setup_.options),
        stop_signal_(stop_signal),
        ranks_(local_ranks(options_, setup_.node)),
        store_(setup_.store, setup_.spec, setup_.run_id, ranks_),
        relay_(options_.prefix_output, options_.log_dir),
        injector_(local_faults(options_.faults, ranks_), options_.chaos, setup_.node.node_rank,
                  options_.nproc_per_node),
        restarts_(options_.max_restarts) {
    for (const auto& [domain, store] : setup_.domain_stores) {
      domain_channels_.emplace(
          domain, std::make_unique<StoreChannel>(store.store, store.spec,
                                                 domain_namespace(setup_.run_id, domain),
                                                 std::vector<int>{}));
    }
    if (!options_.command.empty() && options_.command[0] == "ntp") options_.command[0] = self_exe();
    const int n = options_.nproc_per_node;
    slots_.resize(static_cast<std::size_t>(n));
    for (int local = 0; local < n; ++local) {
      WorkerIdentity& id = slots_[static_cast<std::size_t>(local)].id;
      id.rank = ranks_[static_cast<std::size_t>(local)];
      id.world_size = setup_.node.nnodes * n;
      id.local_rank = local;
      id.local_world_size = n;
      id.node_rank = setup_.node.node_rank;
      id.nnodes = setup_.node.nnodes;
      id.store = setup_.worker_store;
      id.run_id = setup_.run_id;
      id.local_addr = options_.local_addr;
      if (options_.domain_size > 0) {
        id.domain_size = options_.domain_size;
        id.domain_store = domain_store_spec(setup_.worker_domain_store, id.domain());
      }
    }
  }

  int run() {
    start_ = Clock::now();
    for (Slot& slot : slots_) spawn(slot);
    for (;;) {
      const Outcome outcome = watch();
      if (outcome == Outcome::kStopSignal) return stop_all(stop_signal_);
      if (outcome == Outcome::kFinished) break;
      if (const std::optional<int> code = restart_after_failure()) return *code;
    }
    // Everyone still able to finish has finished: hung and stalled workers never will.
    killed_at_end_ = true;
    for (Slot& slot : slots_) {
      if (slot.state == SlotState::kHung) ::killpg(slot.pid, SIGKILL);
    }
    while (!all_done()) {
      relay_.pump(slots_, std::chrono::milliseconds(5));
      reap();
    }
    wait_for_groups();
    for (Slot& slot : slots_) relay_.drain(slot);
    return end_of_job();
  }

 private:
  enum class Outcome { kFinished, kStopSignal, kWorkerFailed };

  double elapsed() const { return std::chrono::duration<double>(Clock::now() - start_).count(); }
  void say(const std::string& line) { std::fprintf(stderr, "ntp launch: %s\n", line.c_str()); }

  Slot* local_slot(int rank) {
    for (Slot& slot : slots_) {
      if (slot.id.rank == rank) return &slot;
    }
    return nullptr;
  }

  // Relays output, reaps, follows steps and fires faults until no worker is running, a stop
  // signal arrives, or (with restart_on_failure) a worker failed.
  Outcome watch() {
    Clock::time_point last_tick = Clock::now();
    for (;;) {
      relay_.pump(slots_, std::chrono::milliseconds(10));
      reap();
      follow_stops();
      groups_.reap();
      settle_left_queries();
      if (stop_signal_ != 0) return Outcome::kStopSignal;
      if (options_.restart_on_failure && !failed_slots().empty()) return Outcome::kWorkerFailed;
      // Only step-placed faults need the steps: without them the store is left alone.
      store_.watch_steps(injector_.needs_steps());
      apply_steps();
      const auto now = Clock::now();
      const double dt = std::chrono::duration<double>(now - last_tick).count();
      last_tick = now;
      for (const Injection& injection : injector_.due(slots_, elapsed(), dt)) {
        carry_out(injection);
      }
      start_due_replacements();
      if (count(SlotState::kRunning) == 0 && count(SlotState::kWaiting) == 0 &&
          !left_queries_pending()) {
        return Outcome::kFinished;
      }
    }
  }

  int count(SlotState state) const {
    return static_cast<int>(std::count_if(slots_.begin(), slots_.end(),
                                          [state](const Slot& s) { return s.state == state; }));
  }
  bool all_done() const { return count(SlotState::kDone) == static_cast<int>(slots_.size()); }
  bool left_queries_pending() const {
    return std::any_of(slots_.begin(), slots_.end(),
                       [](const Slot& s) { return s.left_query.valid(); });
  }

  void apply_steps() {
    const std::map<int, StepReading> readings = store_.steps();
    for (Slot& slot : slots_) {
      const auto it = readings.find(slot.id.rank);
      if (slot.state != SlotState::kRunning || it == readings.end()) continue;
      if (it->second.generation == slot.step_generation) slot.step = it->second.step;
    }
  }

  // A fresh worker for the slot must not see its predecessor's step.
  void reset_step(Slot& slot) {
    slot.step = -1;
    ++slot.step_generation;
    store_.reset_step(slot.id.rank);
  }

  // ---- spawn and reap ----

  void spawn(Slot& slot) {
    std::vector<std::string> env = worker_env_entries(slot.id);
    if (!setup_.password.empty()) env.push_back("NTP_REDIS_PASSWORD=" + setup_.password);
    if (const std::optional<long long> stall = injector_.stall_step(slot.id.rank)) {
      env.push_back("NTP_STALL_AT=" + std::to_string(*stall));
    }
    // After stall_step, which may arm a chaos stall: a fault placed at a step needs the steps.
    if (injector_.needs_steps()) env.push_back(report_steps_env());
    if (const std::optional<std::string> throttle = injector_.throttle_env(slot.id.rank)) {
      env.push_back("NTP_THROTTLE=" + *throttle);
    }
    if (!injector_.fault_points_env().empty()) {  // with any the launcher's environment has
      const char* inherited = std::getenv("NTP_FAULT_POINT");
      env.push_back(
          "NTP_FAULT_POINT=" +
          (inherited != nullptr && *inherited != '\0' ? std::string(inherited) + "," : "") +
          injector_.fault_points_env());
    }
    // Compute threads: this node's CPUs shared by its workers, max(1, cpus / local workers), so
    // co-located workers do not oversubscribe the cores; a value the user set wins.
    const std::string threads =
        std::to_string(std::max(1, cpus_for_workers() / std::max(1, slot.id.local_world_size)));
    for (const char* var : {"OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS"}) {
      if (std::getenv(var) == nullptr) env.push_back(std::string(var) + "=" + threads);
    }
    std::string error;
    const std::optional<SpawnedWorker> worker = spawn_worker(options_.command, env, &error);
    if (!worker) {
      say(error);
      slot.state = SlotState::kDone;
      slot.exit_code = 1;
      return;
    }
    slot.pid = worker->pid;
    slot.state = SlotState::kRunning;
    slot.stopped = false;
    slot.injected.clear();
    slot.step = -1;
    relay_.attach(slot, worker->out_fd, worker->err_fd);
  }

  void reap() {
    for (Slot& slot : slots_) {
      if (slot.state == SlotState::kDone || slot.state == SlotState::kWaiting || slot.pid <= 0) {
        continue;
      }
      const std::optional<int> code = exited_code(slot.pid);
      if (!code) continue;
      end_slowdown(slot, "");  // before the pid is released
      reap_worker(slot.pid);
      groups_.add(slot.pid);
      slot.state = SlotState::kDone;
      slot.exit_code = *code;
      relay_.drain(slot);
      after_exit(slot);
    }
  }

  // A worker stopped by a signal that is not the launcher's (a slowdown's duty cycle is) never
  // ends by itself: it is hung while it stays stopped, so the job can end without it.
  void follow_stops() {
    for (Slot& slot : slots_) {
      if (slot.pid <= 0 || slowdowns_.count(slot.id.rank) != 0) continue;
      const std::string rank = std::to_string(slot.id.rank);
      if (slot.state == SlotState::kRunning && is_stopped(slot.pid)) {
        slot.state = SlotState::kHung;
        slot.stopped = true;
        say("rank " + rank +
            " was stopped by a signal: taken as hung (killed once the others finish)");
      } else if (slot.state == SlotState::kHung && slot.stopped && !is_stopped(slot.pid)) {
        slot.state = SlotState::kRunning;
        slot.stopped = false;
        say("rank " + rank + " was continued");
      }
    }
  }

  // What an exit means: a lost worker, a notice for the job, a replacement.
  void after_exit(Slot& slot) {
    if (!slot.injected.empty()) {
      lose(slot, slot.injected);
    } else if (slot.exit_code != 0 && !stopping_) {
      lose(slot, slot.stopped ? kStoppedCause : "failed");
    }
    if (stopping_) return;
    if (slot.exit_code != 0) {
      // Tells the job now, rather than when its heartbeat goes stale (comm/exit_notice.h).
      const int rank = slot.id.rank;
      const std::string who = comm::incarnation(slot.id.attempt, slot.id.restart_count);
      store_.post([rank, who](comm::Store& s) { (void)comm::post_exit_notice(s, rank, who); });
      if (options_.domain_size > 0) {  // where its domain's watch reads it, under its slot there
        const int slot_in_domain = slot.id.domain_slot();
        domain_channels_.at(slot.id.domain())->post([slot_in_domain, who](comm::Store& s) {
          (void)comm::post_exit_notice(s, slot_in_domain, who);
        });
      }
    }
    if (slot.exit_code != 0 && slot.injected.empty()) {
      say("rank " + std::to_string(slot.id.rank) + " exited with code " +
          std::to_string(slot.exit_code));
    }
    if (!slot.injected.empty()) return;
    if (slot.exit_code == 0) {
      // Fenced (report_left) or done? Asked on the store thread; settled by the main loop.
      const int rank = slot.id.rank;
      const int restart = slot.id.restart_count;
      slot.left_query =
          store_.ask<bool>([rank, restart](comm::Store& s) { return has_left(s, rank, restart); });
    } else if (options_.replace_failed > 0) {
      say(schedule_replacement(slot, true, options_.replace_failed));
    }
  }

  void settle_left_queries() {
    for (Slot& slot : slots_) {
      if (!is_ready(slot.left_query)) continue;
      const bool left = slot.left_query.get();  // get() leaves the future invalid: settled
      if (!left) continue;
      lose(slot, "fenced out of the job (it reported leaving)");
      if (options_.replace_failed > 0 && !stopping_) {
        say(schedule_replacement(slot, false, options_.replace_failed));
      }
    }
  }

  void lose(const Slot& slot, const std::string& cause) {
    lost_.push_back(LostWorker{slot.id.rank, slot.id.restart_count, slot.id.attempt, cause,
                               describe_exit(slot.exit_code) +
                                   (killed_at_end_ ? " (killed when the others finished)" : "")});
  }

  void wait_for_groups() {
    for (pid_t group : groups_.wait_all(kGroupWait)) {
      say("process group " + std::to_string(group) + " still has members after SIGKILL");
    }
  }

  // ---- faults ----

  void carry_out(const Injection& injection) {
    Slot& slot = *local_slot(injection.fault.rank);
    const std::string rank = std::to_string(slot.id.rank);
    const FaultKind kind = injection.fault.kind;
    if (kind == FaultKind::kRepair) return repair(slot, injection.why);
    if (kind == FaultKind::kSlow && injection.ends) return end_slowdown(slot, injection.why);
    if (slot.state != SlotState::kRunning) return;
    const std::string cause =
        std::string("injected ") + fault_kind_name(kind) + " (" + injection.why + ")";
    switch (kind) {
      case FaultKind::kKill:
        say("injecting kill (SIGKILL) into rank " + rank + " (" + injection.why + ")");
        end_slowdown(slot, "");
        slot.injected = cause;
        ::killpg(slot.pid, SIGKILL);
        break;
      case FaultKind::kHang:
        say("injecting hang (SIGSTOP) into rank " + rank + " (" + injection.why + ")");
        end_slowdown(slot, "");
        slot.injected = cause;
        ::killpg(slot.pid, SIGSTOP);
        slot.state = SlotState::kHung;
        break;
      case FaultKind::kStall:
        // The worker did it itself (NTP_STALL_AT) when it started the step.
        say("injecting stall into rank " + rank + " (" + injection.why +
            "): its training thread blocks, its process runs on");
        slot.injected = cause;
        slot.state = SlotState::kHung;
        break;
      case FaultKind::kSlow:
        begin_slowdown(slot, injection);
        break;
      case FaultKind::kPoint:  // carried out by the workers (NTP_FAULT_POINT), never due here
        break;
      case FaultKind::kThrottle:
        // The worker does it itself (NTP_THROTTLE) from that step on.
        say("throttling rank " + rank + "'s compute (" + describe_fault(injection.fault) +
            "): its communication keeps its pace");
        break;
      case FaultKind::kRepair:
        break;
    }
  }

  void begin_slowdown(Slot& slot, const Injection& injection) {
    end_slowdown(slot, "");
    char factor[32];
    std::snprintf(factor, sizeof(factor), "%g", injection.fault.factor);
    say(std::string("injecting slow (factor ") + factor + ", SIGSTOP/SIGCONT every " +
        std::to_string(DutyCycle::kPeriod.count()) + " ms) into rank " +
        std::to_string(slot.id.rank) + " (" + injection.why +
        (injection.fault.until ? ", until step " + std::to_string(*injection.fault.until) : "") +
        ")");
    slowdowns_[slot.id.rank] = std::make_unique<DutyCycle>(slot.pid, injection.fault.factor);
  }

  // Ends the slot's slowdown, if any (the group is left running); says so when `why` is given.
  void end_slowdown(Slot& slot, const std::string& why) {
    const auto it = slowdowns_.find(slot.id.rank);
    if (it == slowdowns_.end()) return;
    it->second->stop();
    slowdowns_.erase(it);
    injector_.forget_slowdown(slot.id.rank);
    if (!why.empty()) {
      say("rank " + std::to_string(slot.id.rank) + " runs at full speed again (" + why + ")");
    }
  }

  void repair(Slot& slot, const std::string& why) {
    if (slot.state == SlotState::kRunning || slot.state == SlotState::kWaiting) return;
    if (slot.state == SlotState::kHung) {
      end_slowdown(slot, "");
      ::killpg(slot.pid, SIGKILL);
      while (!exited_code(slot.pid)) relay_.pump(slots_, std::chrono::milliseconds(1));
      const int code = *exited_code(slot.pid);
      reap_worker(slot.pid);
      groups_.add(slot.pid);
      slot.exit_code = code;
      relay_.drain(slot);
      slot.state = SlotState::kDone;
      lose(slot, slot.stopped ? kStoppedCause : slot.injected);
    }
    slot.id.restart_count += 1;
    reset_step(slot);
    say("repair: starting a fresh worker for rank " + std::to_string(slot.id.rank) + " (restart " +
        std::to_string(slot.id.restart_count) + ", " + why + ")");
    spawn(slot);
  }

  // ---- replacement and restart ----

  // Starts the replacements whose backoff has passed, once the store answers (probed on the
  // store thread; the loop goes on relaying and reaping while a probe is in flight).
  void start_due_replacements() {
    const auto now = Clock::now();
    for (Slot& slot : slots_) {
      if (slot.state != SlotState::kWaiting || now < slot.replace_at) continue;
      if (!slot.probe.valid()) {
        slot.probe = store_.probe();
        continue;
      }
      if (!is_ready(slot.probe)) continue;
      if (!slot.probe.get()) {
        if (const std::string line = hold_replacement(slot, now); !line.empty()) say(line);
        continue;
      }
      slot.replacements += 1;
      slot.id.restart_count += 1;
      reset_step(slot);
      say("replacing rank " + std::to_string(slot.id.rank) + ": starting a fresh worker (restart " +
          std::to_string(slot.id.restart_count) + ")" +
          (slot.held_since ? " now that the store answers" : ""));
      spawn(slot);
    }
  }

  // Slots whose worker died unexpectedly and that are not lost yet.
  std::vector<Slot*> failed_slots() {
    std::vector<Slot*> failed;
    for (Slot& slot : slots_) {
      if (slot.state == SlotState::kDone && !slot.lost && slot.exit_code != 0) {
        failed.push_back(&slot);
      }
    }
    return failed;
  }

  // restart_on_failure: the failed slots are lost, the others are stopped and started again with
  // the next attempt number. Returns the launcher's exit code when it gives up instead.
  std::optional<int> restart_after_failure() {
    const std::vector<Slot*> failed = failed_slots();
    const int code = failed.front()->exit_code;
    std::vector<int> ranks;
    for (Slot* slot : failed) ranks.push_back(slot->id.rank);
    say("rank " + join_ranks(ranks) + " failed (exit code " + std::to_string(code) +
        "): stopping the other workers");
    stop_workers();
    if (const std::string give_up = restarts_.after_failure(slots_, failed); !give_up.empty()) {
      say(give_up);
      JobEnd end;
      end.lost = lost_;
      end.failed_rank = failed.front()->id.rank;
      end.failed_code = code;
      for (const std::string& line : summary_lines(end, code)) say(line);
      return code;
    }
    say("restarting the job (attempt " + std::to_string(restarts_.attempt()) + ") without rank " +
        join_ranks(restarts_.lost_ranks()));
    for (Slot& slot : slots_) {
      if (slot.lost) continue;
      // A fault at=STEP fires only once anyway: it left the pending list when it fired.
      reset_step(slot);
      spawn(slot);
    }
    return std::nullopt;
  }

  // ---- stopping and the end ----

  int stop_all(int signo) {
    say(std::string("received ") + (signo == SIGINT ? "SIGINT" : "SIGTERM") +
        ": stopping every worker");
    stop_workers();
    return 128 + signo;
  }

  // SIGTERM (and SIGCONT, so a hung or slowed worker can act on it) to every live group, SIGKILL
  // after the grace period, then reap every process of every group.
  void stop_workers() {
    stopping_ = true;
    for (Slot& slot : slots_) {
      end_slowdown(slot, "");
      if (slot.state == SlotState::kWaiting) slot.state = SlotState::kDone;  // not started now
      if (slot.state == SlotState::kDone) continue;
      ::killpg(slot.pid, SIGTERM);
      ::killpg(slot.pid, SIGCONT);
    }
    const auto deadline = Clock::now() + options_.grace;
    while (!all_done() && Clock::now() < deadline) {
      relay_.pump(slots_, std::chrono::milliseconds(5));
      reap();
    }
    for (Slot& slot : slots_) {
      if (slot.state != SlotState::kDone) ::killpg(slot.pid, SIGKILL);
    }
    while (!all_done()) {
      relay_.pump(slots_, std::chrono::milliseconds(5));
      reap();
    }
    wait_for_groups();
    for (Slot& slot : slots_) {
      relay_.drain(slot);
      slot.left_query = {};
      slot.probe = {};
    }
    stopping_ = false;
  }

  // Reads the workers' end-of-job reports (bounded) and applies launch_summary's rule.
  int end_of_job() {
    struct Ask {
      int rank;
      std::string who;
      bool exited_ok;
    };
    std::vector<Ask> asks;
    for (const Slot& slot : slots_) {
      asks.push_back(Ask{slot.id.rank, comm::incarnation(slot.id.attempt, slot.id.restart_count),
                         slot.exit_code == 0});
    }
    std::future<JobEnd> reports = store_.ask<JobEnd>([asks](comm::Store& s) {
      JobEnd end;
      for (const Ask& a : asks) {
        Result<std::string> step = s.get(step_key(a.rank));
        if (step.ok() && !step->empty() && (*step)[0] != '-') end.reported_steps = true;
        if (!a.exited_ok || end.finished_rank) continue;
        if (const std::optional<long long> steps = finished_steps(s, a.rank, a.who)) {
          end.finished_rank = a.rank;
          end.finished_steps = *steps;
        }
      }
      return end;
    });
    JobEnd end;
    if (reports.wait_for(kEndReportWait) == std::future_status::ready) {
      end = reports.get();
    } else {
      end.store_answered = false;
      say("the store did not answer within " + std::to_string(kEndReportWait.count()) +
          " s: the exit code cannot use the workers' end-of-job reports");
    }
    end.lost = lost_;
    for (const Slot& slot : slots_) {
      if (slot.injected.empty() && !slot.lost && slot.exit_code != 0) {
        end.failed_rank = slot.id.rank;
        end.failed_code = slot.exit_code;
        break;
      }
    }
    const int code = job_exit_code(end);
    for (const std::string& line : summary_lines(end, code)) say(line);
    return code;
  }

  LaunchSetup setup_;
  LaunchOptions& options_;
  const volatile std::sig_atomic_t& stop_signal_;
  std::vector<int> ranks_;
  StoreChannel store_;
  std::map<int, std::unique_ptr<StoreChannel>> domain_channels_;  // by domain (domain_size > 0)
  OutputRelay relay_;
  FaultInjector injector_;
  JobRestarts restarts_;
  ProcessGroups groups_;
  std::vector<Slot> slots_;
  std::map<int, std::unique_ptr<DutyCycle>> slowdowns_;  // by rank
  std::vector<LostWorker> lost_;
  bool stopping_ = false;       // the launcher is stopping the workers: exits are expected
  bool killed_at_end_ = false;  // hung workers are being killed because the others finished
  Clock::time_point start_;
};

}  // namespace

std::vector<int> local_ranks(const LaunchOptions& options, const NodeIdentity& node) {
  std::vector<int> ranks;
  for (int local = 0; local < options.nproc_per_node; ++local) {
    ranks.push_back(options.ranks.empty() ? node.node_rank * options.nproc_per_node + local
                                          : options.ranks[static_cast<std::size_t>(local)]);
  }
  return ranks;
}

int run_job(LaunchSetup setup, const volatile std::sig_atomic_t& stop_signal) {
  LaunchJob job(std::move(setup), stop_signal);
  return job.run();
}

}  // namespace ntp::launch
