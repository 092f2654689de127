#include "elastic/launcher.h"

#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <thread>

#include "comm/exit_notice.h"
#include "comm/store.h"
#include "core/rng.h"
#include "elastic/identity.h"
#include "elastic/step_report.h"

namespace ntp::elastic {
namespace {

// CPUs this process may run on (its affinity mask), at least 1.
int cpus_for_workers() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (::sched_getaffinity(0, sizeof(set), &set) != 0) return 1;
  return std::max(1, CPU_COUNT(&set));
}

volatile std::sig_atomic_t g_stop_signal = 0;

extern "C" void on_stop_signal(int signo) { g_stop_signal = signo; }

using Clock = std::chrono::steady_clock;

// kWaiting: the worker is gone and its replacement (replace_failed) is scheduled.
enum class SlotState { kRunning, kHung, kWaiting, kDone };

// replace_failed: the pause before a slot's k-th replacement (0.5 s doubling, at most 8 s), how
// often a held replacement retries the store, and how long it waits for it at most.
std::chrono::milliseconds replace_backoff(int replacements) {
  return std::chrono::milliseconds(500 << std::min(replacements, 4));
}
constexpr std::chrono::milliseconds kStoreRetry{1000};
constexpr std::chrono::seconds kStoreWaitLimit{600};

// One output stream of one worker: a non-blocking pipe and the unfinished last line.
struct Stream {
  int fd = -1;
  std::string partial;
};

struct Slot {
  WorkerIdentity id;
  pid_t pid = -1;
  SlotState state = SlotState::kDone;
  bool injected = false;  // hit by kill/hang: its exit does not count
  bool lost = false;      // failed under restart_on_failure: never started again
  int exit_code = 0;      // when done: exit code, or 128 + signal
  long long step = -1;    // last reported step
  int replacements = 0;   // replace_failed: replacements started for this slot
  std::chrono::steady_clock::time_point replace_at;  // kWaiting: when to start the replacement
  std::optional<std::chrono::steady_clock::time_point> held_since;  // held for the store since
  Stream out;
  Stream err;
  std::unique_ptr<std::ofstream> log;
};

std::string self_exe() {
  std::error_code ec;
  std::filesystem::path path = std::filesystem::read_symlink("/proc/self/exe", ec);
  return ec ? std::string("ntp") : path.string();
}

// Whether `addr` is an address of this machine: a socket can listen on it.
bool is_local_address(const std::string& addr) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE;
  addrinfo* found = nullptr;
  if (::getaddrinfo(addr.c_str(), "0", &hints, &found) != 0) return false;
  bool bound = false;
  for (addrinfo* a = found; a != nullptr && !bound; a = a->ai_next) {
    const int fd = ::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) continue;
    bound = ::bind(fd, a->ai_addr, a->ai_addrlen) == 0;
    ::close(fd);
  }
  ::freeaddrinfo(found);
  return bound;
}

std::string generated_run_id() {
  const auto now = std::chrono::system_clock::now().time_since_epoch().count();
  const std::uint64_t mix =
      splitmix64(static_cast<std::uint64_t>(now) ^ (static_cast<std::uint64_t>(::getpid()) << 32));
  char text[32];
  std::snprintf(text, sizeof(text), "run-%012llx",
                static_cast<unsigned long long>(mix & 0xFFFFFFFFFFFFULL));
  return text;
}

// The store spec workers see: a password stays out of NTP_STORE (it would show in `ps e`).
std::string strip_password(const std::string& spec, std::string* password) {
  if (spec.rfind("redis://", 0) != 0) return spec;
  const std::string rest = spec.substr(8);
  const auto at = rest.rfind('@');
  if (at == std::string::npos) return spec;
  const std::string auth = rest.substr(0, at);
  *password = !auth.empty() && auth[0] == ':' ? auth.substr(1) : auth;
  return "redis://" + rest.substr(at + 1);
}

class Launcher {
 public:
  Launcher(LaunchOptions options, NodeIdentity node, std::shared_ptr<comm::Store> store,
           std::string spec, std::string worker_store, std::string password, std::string run_id)
      : options_(std::move(options)),
        node_(node),
        store_(std::move(store)),
        spec_(std::move(spec)),
        worker_store_(std::move(worker_store)),
        password_(std::move(password)),
        run_id_(std::move(run_id)),
        rng_(options_.chaos
                 ? Rng(options_.chaos->seed).fork(static_cast<std::uint64_t>(node_.node_rank))
                 : Rng(0)) {
    if (!options_.command.empty() && options_.command[0] == "ntp") options_.command[0] = self_exe();
    const int n = options_.nproc_per_node;
    slots_.resize(static_cast<std::size_t>(n));
    for (int local = 0; local < n; ++local) {
      WorkerIdentity& id = slots_[static_cast<std::size_t>(local)].id;
      id.rank = options_.ranks.empty() ? node_.node_rank * n + local
                                       : options_.ranks[static_cast<std::size_t>(local)];
      id.world_size = node_.nnodes * n;
      id.local_rank = local;
      id.local_world_size = n;
      id.node_rank = node_.node_rank;
      id.nnodes = node_.nnodes;
      id.store = worker_store_;
      id.run_id = run_id_;
      id.local_addr = options_.local_addr;
    }
    for (const FaultSpec& fault : options_.faults) {
      if (local_slot(fault.rank) != nullptr) pending_.push_back(fault);
    }
  }

  int run() {
    start_ = Clock::now();
    for (Slot& slot : slots_) spawn(slot);
    for (;;) {
      const Outcome outcome = watch();
      if (outcome == Outcome::kStopSignal) return stop_all(g_stop_signal);
      if (outcome == Outcome::kFinished) break;
      if (const std::optional<int> code = restart_after_failure()) return *code;
    }
    // Everyone still able to finish has finished: hung workers never will.
    for (Slot& slot : slots_) {
      if (slot.state == SlotState::kHung) {
        ::killpg(slot.pid, SIGKILL);
      }
    }
    while (!all_done()) {
      pump_output(std::chrono::milliseconds(5));
      reap();
    }
    wait_for_groups();
    drain_all();
    return exit_code();
  }

 private:
  Slot* local_slot(int rank) {
    for (Slot& slot : slots_) {
      if (slot.id.rank == rank) return &slot;
    }
    return nullptr;
  }

  double elapsed() const { return std::chrono::duration<double>(Clock::now() - start_).count(); }

  void say(const std::string& line) { std::fprintf(stderr, "ntp launch: %s\n", line.c_str()); }

  enum class Outcome { kFinished, kStopSignal, kWorkerFailed };

  // Relays output, reaps, reads steps and fires faults until no worker is running, a stop signal
  // arrives, or (with restart_on_failure) a worker failed.
  Outcome watch() {
    Clock::time_point last_steps = Clock::now();
    Clock::time_point last_tick = last_steps;
    for (;;) {
      pump_output(std::chrono::milliseconds(10));
      reap();
      reap_groups();
      if (g_stop_signal != 0) return Outcome::kStopSignal;
      if (options_.restart_on_failure && !failed_slots().empty()) return Outcome::kWorkerFailed;
      const auto now = Clock::now();
      // Only step-placed faults need the steps: a launcher without them leaves the store alone
      // (it may be unreachable for a while, and every call would stall the loop).
      if (now - last_steps >= std::chrono::milliseconds(20) && waits_for_steps()) {
        read_steps();
        last_steps = now;
      }
      fire_faults();
      if (options_.chaos) {
        chaos(std::chrono::duration<double>(now - last_tick).count());
      }
      last_tick = now;
      start_due_replacements();
      if (running_count() == 0 && waiting_count() == 0) return Outcome::kFinished;
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
    for (Slot* slot : failed) {
      slot->lost = true;
      ranks.push_back(slot->id.rank);
    }
    say("rank " + join_ranks(ranks) + " failed (exit code " + std::to_string(code) +
        "): stopping the other workers");
    stop_workers();
    lost_ranks_.insert(lost_ranks_.end(), ranks.begin(), ranks.end());
    std::sort(lost_ranks_.begin(), lost_ranks_.end());
    if (attempt_ >= options_.max_restarts) {
      say("giving up: the job failed after " + std::to_string(attempt_) + " restart" +
          (attempt_ == 1 ? "" : "s") + " (--max-restarts " + std::to_string(options_.max_restarts) +
          ")");
      return code;
    }
    std::vector<Slot*> survivors;
    for (Slot& slot : slots_) {
      if (!slot.lost) survivors.push_back(&slot);
    }
    if (survivors.empty()) {
      say("giving up: every slot of this node has failed");
      return code;
    }
    ++attempt_;
    say("restarting the job (attempt " + std::to_string(attempt_) + ") without rank " +
        join_ranks(lost_ranks_));
    for (Slot* slot : survivors) {
      slot->id.attempt = attempt_;
      slot->id.lost_ranks = lost_ranks_;
      // A restarted worker must not see its previous step (a fault at=STEP fires only once
      // anyway: it left pending_ when it fired).
      (void)store_->set(step_key(slot->id.rank), "-1");
      spawn(*slot);
    }
    return std::nullopt;
  }

  void spawn(Slot& slot) {
    int out[2];
    int err[2];
    if (::pipe2(out, O_CLOEXEC) != 0 || ::pipe2(err, O_CLOEXEC) != 0) {
      say(std::string("cannot create pipes: ") + std::strerror(errno));
      slot.state = SlotState::kDone;
      slot.exit_code = 1;
      return;
    }
    std::vector<std::string> env = worker_env_entries(slot.id);
    if (!password_.empty()) env.push_back("NTP_REDIS_PASSWORD=" + password_);
    // Compute threads: this node's CPUs shared by its workers, max(1, cpus / local workers), so
    // co-located workers do not oversubscribe the cores; a value the user set wins.
    const std::string threads =
        std::to_string(std::max(1, cpus_for_workers() / std::max(1, slot.id.local_world_size)));
    for (const char* var : {"OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS"}) {
      if (std::getenv(var) == nullptr) env.push_back(std::string(var) + "=" + threads);
    }
    std::vector<char*> argv;
    for (std::string& arg : options_.command) argv.push_back(arg.data());
    argv.push_back(nullptr);
    const pid_t parent = ::getpid();
    std::fflush(nullptr);
    const pid_t pid = ::fork();
    if (pid == 0) {
      ::setpgid(0, 0);
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (::getppid() != parent) _exit(127);  // the launcher died before we got here
      struct sigaction dfl {};
      dfl.sa_handler = SIG_DFL;
      for (int signo : {SIGINT, SIGTERM, SIGPIPE}) ::sigaction(signo, &dfl, nullptr);
      sigset_t none;
      sigemptyset(&none);
      ::sigprocmask(SIG_SETMASK, &none, nullptr);
      ::dup2(out[1], STDOUT_FILENO);
      ::dup2(err[1], STDERR_FILENO);
      for (std::string& entry : env) ::putenv(entry.data());
      ::execvp(argv[0], argv.data());
      std::fprintf(stderr, "ntp launch: cannot run '%s': %s\n", argv[0], std::strerror(errno));
      _exit(127);
    }
    ::close(out[1]);
    ::close(err[1]);
    if (pid < 0) {
      say(std::string("fork failed: ") + std::strerror(errno));
      ::close(out[0]);
      ::close(err[0]);
      slot.state = SlotState::kDone;
      slot.exit_code = 1;
      return;
    }
    ::setpgid(pid, pid);  // also here, so killpg works even before the child ran
    ::fcntl(out[0], F_SETFL, O_NONBLOCK);
    ::fcntl(err[0], F_SETFL, O_NONBLOCK);
    slot.pid = pid;
    slot.state = SlotState::kRunning;
    slot.injected = false;
    slot.step = -1;
    slot.out = Stream{out[0], {}};
    slot.err = Stream{err[0], {}};
    if (!options_.log_dir.empty()) {
      std::error_code ec;
      std::filesystem::create_directories(options_.log_dir, ec);
      slot.log = std::make_unique<std::ofstream>(
          options_.log_dir + "/rank_" + std::to_string(slot.id.rank) + ".log", std::ios::app);
      *slot.log << "=== ntp launch: rank " << slot.id.rank << " pid " << pid << " restart "
                << slot.id.restart_count << " attempt " << slot.id.attempt << " ===\n";
    }
  }

  void emit(Slot& slot, bool is_err, const std::string& line) {
    std::FILE* to = is_err ? stderr : stdout;
    if (options_.prefix_output) {
      std::fprintf(to, "[rank %d] %s\n", slot.id.rank, line.c_str());
    } else {
      std::fprintf(to, "%s\n", line.c_str());
    }
    std::fflush(to);
    if (slot.log) {
      *slot.log << line << '\n';
      slot.log->flush();
    }
  }

  // Reads what is available on `stream`; returns false at EOF or error (fd closed).
  bool read_stream(Slot& slot, Stream& stream, bool is_err) {
    char buffer[4096];
    for (;;) {
      const ssize_t got = ::read(stream.fd, buffer, sizeof(buffer));
      if (got > 0) {
        stream.partial.append(buffer, static_cast<std::size_t>(got));
        std::size_t pos;
        while ((pos = stream.partial.find('\n')) != std::string::npos) {
          emit(slot, is_err, stream.partial.substr(0, pos));
          stream.partial.erase(0, pos + 1);
        }
        continue;
      }
      if (got < 0 && (errno == EAGAIN || errno == EINTR)) return true;
      if (!stream.partial.empty()) emit(slot, is_err, stream.partial);
      stream.partial.clear();
      ::close(stream.fd);
      stream.fd = -1;
      return false;
    }
  }

  void pump_output(std::chrono::milliseconds wait) {
    std::vector<pollfd> fds;
    std::vector<std::pair<Slot*, bool>> owners;
    for (Slot& slot : slots_) {
      if (slot.out.fd >= 0) {
        fds.push_back(pollfd{slot.out.fd, POLLIN, 0});
        owners.emplace_back(&slot, false);
      }
      if (slot.err.fd >= 0) {
        fds.push_back(pollfd{slot.err.fd, POLLIN, 0});
        owners.emplace_back(&slot, true);
      }
    }
    if (fds.empty()) {
      std::this_thread::sleep_for(wait);
      return;
    }
    const int ready = ::poll(fds.data(), fds.size(), static_cast<int>(wait.count()));
    if (ready <= 0) return;
    for (std::size_t i = 0; i < fds.size(); ++i) {
      if (fds[i].revents == 0) continue;
      auto [slot, is_err] = owners[i];
      read_stream(*slot, is_err ? slot->err : slot->out, is_err);
    }
  }

  // After a worker exited, its pipes may still be held open by its children; take what is
  // there now and stop listening.
  void drain(Slot& slot) {
    for (bool is_err : {false, true}) {
      Stream& stream = is_err ? slot.err : slot.out;
      if (stream.fd < 0) continue;
      if (read_stream(slot, stream, is_err)) {
        if (!stream.partial.empty()) emit(slot, is_err, stream.partial);
        stream.partial.clear();
        ::close(stream.fd);
        stream.fd = -1;
      }
    }
  }
  void drain_all() {
    for (Slot& slot : slots_) drain(slot);
  }

  void reap() {
    for (Slot& slot : slots_) {
      if (slot.state == SlotState::kDone || slot.pid <= 0) continue;
      int status = 0;
      const pid_t got = ::waitpid(slot.pid, &status, WNOHANG);
      if (got != slot.pid) continue;
      slot.state = SlotState::kDone;
      slot.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      // Its group may still hold children: they go with it (no orphans). They are reaped by
      // reap_groups(): the launcher is their subreaper once the worker is gone.
      ::killpg(slot.pid, SIGKILL);
      dying_groups_.push_back(slot.pid);
      drain(slot);
      if (slot.exit_code != 0 && !stopping_) {
        // Tells the job now, rather than when its heartbeat goes stale (comm/exit_notice.h).
        (void)comm::post_exit_notice(*store_, slot.id.rank,
                                     comm::incarnation(slot.id.attempt, slot.id.restart_count));
      }
      if (slot.exit_code != 0 && !slot.injected && !stopping_) {
        say("rank " + std::to_string(slot.id.rank) + " exited with code " +
            std::to_string(slot.exit_code));
      }
      if (options_.replace_failed > 0 && !slot.injected && !stopping_) schedule_replacement(slot);
    }
  }

  // replace_failed: a failed or fenced worker gets a successor after a backoff.
  void schedule_replacement(Slot& slot) {
    const bool failed = slot.exit_code != 0;
    if (!failed && !has_left(*store_, slot.id.rank, slot.id.restart_count)) return;  // done
    const std::string what = failed ? "failed" : "was fenced out of the job";
    if (slot.replacements >= options_.replace_failed) {
      say("rank " + std::to_string(slot.id.rank) + " " + what +
          "; not replaced: --replace-failed " + std::to_string(options_.replace_failed) +
          " replacements used");
      return;
    }
    const std::chrono::milliseconds pause = replace_backoff(slot.replacements);
    slot.state = SlotState::kWaiting;
    slot.replace_at = Clock::now() + pause;
    slot.held_since.reset();
    char text[64];
    std::snprintf(text, sizeof(text), "%.1f s", static_cast<double>(pause.count()) / 1000.0);
    say("rank " + std::to_string(slot.id.rank) + " " + what + ": replacing it in " + text +
        " (replacement " + std::to_string(slot.replacements + 1) + " of " +
        std::to_string(options_.replace_failed) + ")");
  }

  // Starts the replacements whose backoff has passed, once the store answers: a replacement asks
  // to join through the store, so on a node cut off from it the replacement is held (a store that
  // broke is opened again: a connection lost in the outage may not come back by itself).
  void start_due_replacements() {
    for (Slot& slot : slots_) {
      if (slot.state != SlotState::kWaiting || Clock::now() < slot.replace_at) continue;
      if (!store_answers()) {
        const auto now = Clock::now();
        if (!slot.held_since) {
          slot.held_since = now;
          say("the store does not answer: holding the replacement of rank " +
              std::to_string(slot.id.rank) + " until it does");
        } else if (now - *slot.held_since > kStoreWaitLimit) {
          say("the store did not answer for " + std::to_string(kStoreWaitLimit.count()) +
              " s: rank " + std::to_string(slot.id.rank) + " is not replaced");
          slot.state = SlotState::kDone;
          continue;
        }
        slot.replace_at = now + kStoreRetry;
        continue;
      }
      slot.replacements += 1;
      slot.id.restart_count += 1;
      (void)store_->set(step_key(slot.id.rank), "-1");  // a fresh worker, no step yet
      say("replacing rank " + std::to_string(slot.id.rank) + ": starting a fresh worker (restart " +
          std::to_string(slot.id.restart_count) + ")" +
          (slot.held_since ? " now that the store answers" : ""));
      spawn(slot);
    }
  }

  // One store round trip; on failure the store is opened afresh (and that is tried once).
  bool store_answers() {
    if (store_->exists(step_key(slots_.front().id.rank)).ok()) return true;
    Result<std::shared_ptr<comm::Store>> fresh = comm::open_store(spec_, run_id_);
    if (!fresh.ok()) return false;
    store_ = *fresh;
    return store_->exists(step_key(slots_.front().id.rank)).ok();
  }

  // Reaps what is left of the groups of exited workers (SIGKILLed, reparented to the launcher)
  // and forgets a group once it has no member at all. kill(pid, 0) succeeds on a zombie, so a
  // group is only gone when its last member has been reaped.
  void reap_groups() {
    for (auto it = dying_groups_.begin(); it != dying_groups_.end();) {
      int status = 0;
      while (::waitpid(-*it, &status, WNOHANG) > 0) {
      }
      if (::killpg(*it, 0) != 0 && errno == ESRCH) {
        it = dying_groups_.erase(it);
      } else {
        ::killpg(*it, SIGKILL);  // a member forked after the first SIGKILL
        ++it;
      }
    }
  }

  // Returns once every process of every worker group is gone (reaped), so that nothing a worker
  // started outlives the launcher. A member that is not the launcher's descendant (it joined the
  // group from outside) cannot be reaped here; after a bound the launcher says so and returns.
  void wait_for_groups() {
    const auto deadline = Clock::now() + std::chrono::seconds(10);
    reap_groups();
    while (!dying_groups_.empty() && Clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
      reap_groups();
    }
    for (pid_t group : dying_groups_) {
      say("process group " + std::to_string(group) + " still has members after SIGKILL");
    }
  }

  int running_count() const {
    int n = 0;
    for (const Slot& slot : slots_) n += slot.state == SlotState::kRunning ? 1 : 0;
    return n;
  }
  int waiting_count() const {
    int n = 0;
    for (const Slot& slot : slots_) n += slot.state == SlotState::kWaiting ? 1 : 0;
    return n;
  }
  bool waits_for_steps() const {
    for (const FaultSpec& fault : pending_) {
      if (fault.step) return true;
    }
    return false;
  }
  bool all_done() const {
    for (const Slot& slot : slots_) {
      if (slot.state != SlotState::kDone) return false;
    }
    return true;
  }

  void read_steps() {
    for (Slot& slot : slots_) {
      if (slot.state != SlotState::kRunning) continue;
      Result<std::string> value = store_->get(step_key(slot.id.rank));
      if (!value.ok()) continue;
      try {
        slot.step = std::stoll(*value);
      } catch (const std::exception&) {
      }
    }
  }

  long long max_live_step() const {
    long long best = -1;
    for (const Slot& slot : slots_) {
      if (slot.state == SlotState::kRunning) best = std::max(best, slot.step);
    }
    return best;
  }

  void inject(Slot& slot, FaultKind kind, const std::string& why) {
    if (kind == FaultKind::kRepair) {
      if (slot.state == SlotState::kRunning) return;  // nothing to repair (yet)
      if (slot.state == SlotState::kHung) {
        ::killpg(slot.pid, SIGKILL);
        int status = 0;
        ::waitpid(slot.pid, &status, 0);
        dying_groups_.push_back(slot.pid);
        drain(slot);
        slot.state = SlotState::kDone;
      }
      slot.id.restart_count += 1;
      // A fresh worker must not see the dead one's step.
      (void)store_->set(step_key(slot.id.rank), "-1");
      say("repair: starting a fresh worker for rank " + std::to_string(slot.id.rank) +
          " (restart " + std::to_string(slot.id.restart_count) + ", " + why + ")");
      spawn(slot);
      return;
    }
    if (slot.state != SlotState::kRunning) return;
    slot.injected = true;
    if (kind == FaultKind::kKill) {
      say("injecting kill (SIGKILL) into rank " + std::to_string(slot.id.rank) + " (" + why + ")");
      ::killpg(slot.pid, SIGKILL);
    } else {
      say("injecting hang (SIGSTOP) into rank " + std::to_string(slot.id.rank) + " (" + why + ")");
      ::killpg(slot.pid, SIGSTOP);
      slot.state = SlotState::kHung;
    }
  }

  void fire_faults() {
    for (auto it = pending_.begin(); it != pending_.end();) {
      Slot* slot = local_slot(it->rank);
      bool due = false;
      std::string why;
      if (it->seconds) {
        due = elapsed() >= *it->seconds;
        why = "at " + std::to_string(*it->seconds) + " s";
      } else {
        const long long step = it->kind == FaultKind::kRepair ? max_live_step() : slot->step;
        due = slot->state != SlotState::kDone && step >= *it->step;
        if (it->kind == FaultKind::kRepair) due = step >= *it->step;
        why = "at step " + std::to_string(*it->step);
      }
      if (due && it->kind == FaultKind::kRepair && slot->state == SlotState::kRunning) {
        due = false;  // wait until the slot is dead or hung
      }
      if (due) {
        inject(*slot, it->kind, why);
        it = pending_.erase(it);
      } else {
        ++it;
      }
    }
  }

  void chaos(double dt) {
    if (dt <= 0) return;
    const double p = 1.0 - std::exp(-options_.chaos->rate_per_second * dt);
    if (rng_.uniform() >= p) return;
    std::vector<Slot*> live;
    for (Slot& slot : slots_) {
      if (slot.state == SlotState::kRunning) live.push_back(&slot);
    }
    if (live.size() < 2) return;  // never the last live worker
    Slot* victim = live[rng_.below(live.size())];
    const FaultKind kind = rng_.below(2) == 0 ? FaultKind::kKill : FaultKind::kHang;
    inject(*victim, kind, "chaos at " + std::to_string(elapsed()) + " s");
  }

  int stop_all(int signo) {
    say(std::string("received ") + (signo == SIGINT ? "SIGINT" : "SIGTERM") +
        ": stopping every worker");
    stop_workers();
    return 128 + signo;
  }

  // SIGTERM (and SIGCONT, so a hung worker can act on it) to every live group, SIGKILL after
  // the grace period, then reap every process of every group.
  void stop_workers() {
    stopping_ = true;
    for (Slot& slot : slots_) {
      if (slot.state == SlotState::kWaiting) slot.state = SlotState::kDone;  // not started now
      if (slot.state == SlotState::kDone) continue;
      ::killpg(slot.pid, SIGTERM);
      ::killpg(slot.pid, SIGCONT);
    }
    const auto deadline = Clock::now() + options_.grace;
    while (!all_done() && Clock::now() < deadline) {
      pump_output(std::chrono::milliseconds(5));
      reap();
    }
    for (Slot& slot : slots_) {
      if (slot.state != SlotState::kDone) ::killpg(slot.pid, SIGKILL);
    }
    while (!all_done()) {
      pump_output(std::chrono::milliseconds(5));
      reap();
    }
    wait_for_groups();
    drain_all();
    stopping_ = false;
  }

  int exit_code() {
    for (const Slot& slot : slots_) {
      if (!slot.injected && !slot.lost && slot.exit_code != 0) return slot.exit_code;
    }
    return 0;
  }

  LaunchOptions options_;
  NodeIdentity node_;
  std::shared_ptr<comm::Store> store_;
  std::string spec_;  // the store as given (with its password): opened again after an outage
  std::string worker_store_;
  std::string password_;
  std::string run_id_;
  Rng rng_;
  std::vector<Slot> slots_;
  std::vector<FaultSpec> pending_;
  std::vector<pid_t> dying_groups_;  // groups of reaped workers that may still have members
  bool stopping_ = false;            // the launcher is stopping the workers: exits are expected
  int attempt_ = 0;                  // restarts of the job so far (restart_on_failure)
  std::vector<int> lost_ranks_;      // ranks of failed slots, ascending
  Clock::time_point start_;
};

}  // namespace

Result<int> run_launch(const LaunchOptions& options) {
  if (options.nproc_per_node < 1) {
    return invalid_argument("--nproc-per-node " + std::to_string(options.nproc_per_node) +
                            " must be at least 1 (the number of workers on this node)");
  }
  if (options.command.empty()) {
    return invalid_argument("no worker command: use `ntp launch [options] -- COMMAND ...`");
  }
  if (options.max_restarts < 0) {
    return invalid_argument("--max-restarts " + std::to_string(options.max_restarts) +
                            " must be at least 0");
  }
  if (options.replace_failed < 0) {
    return invalid_argument("--replace-failed " + std::to_string(options.replace_failed) +
                            " must be at least 0 (replacements per slot)");
  }
  if (options.replace_failed > 0 && options.restart_on_failure) {
    return invalid_argument(
        "--replace-failed cannot be combined with --restart-on-failure: one replaces a failed "
        "worker in the running job, the other restarts the job without its slot; drop one");
  }
  if (!options.local_addr.empty() && !is_local_address(options.local_addr)) {
    return invalid_argument("--local-addr " + options.local_addr +
                            " is not an address of this machine (nothing can listen on it); "
                            "give one of its addresses that the other nodes reach");
  }
  for (const FaultSpec& fault : options.faults) {
    if (options.restart_on_failure && fault.kind == FaultKind::kRepair) {
      return invalid_argument(
          "--inject repair:rank=" + std::to_string(fault.rank) +
          " cannot be combined with --restart-on-failure (a failed slot is lost for the run): "
          "drop one of them");
    }
  }
  NTP_ASSIGN_OR_RETURN(NodeIdentity node,
                       resolve_node_identity(options.nnodes, options.node_rank, process_env()));
  const int world = node.nnodes * options.nproc_per_node;
  if (!options.ranks.empty()) {
    if (static_cast<int>(options.ranks.size()) != options.nproc_per_node) {
      return invalid_argument("--ranks " + join_ranks(options.ranks) + " names " +
                              std::to_string(options.ranks.size()) + " ranks for " +
                              std::to_string(options.nproc_per_node) +
                              " workers (--nproc-per-node): give one global rank per worker");
    }
    std::vector<int> sorted = options.ranks;
    std::sort(sorted.begin(), sorted.end());
    if (sorted.front() < 0 || sorted.back() >= world) {
      return invalid_argument("--ranks " + join_ranks(options.ranks) + " must lie in [0, " +
                              std::to_string(world) + ") (--nnodes x --nproc-per-node)");
    }
    if (std::adjacent_find(sorted.begin(), sorted.end()) != sorted.end()) {
      return invalid_argument("--ranks " + join_ranks(options.ranks) +
                              " names a rank twice: each worker needs its own");
    }
  }
  for (const FaultSpec& fault : options.faults) {
    if (fault.rank >= world) {
      return invalid_argument("--inject " + std::string(fault_kind_name(fault.kind)) +
                              ":rank=" + std::to_string(fault.rank) + " is outside the world of " +
                              std::to_string(world) + " ranks; use a rank below " +
                              std::to_string(world));
    }
  }
  if (options.store.empty() && node.nnodes > 1) {
    return invalid_argument("--nnodes " + std::to_string(node.nnodes) + " (from " + node.source +
                            ") needs a store every node reaches: pass --store "
                            "redis://HOST:PORT or --store file:DIR on a shared file system");
  }
  const std::string run_id = options.run_id.empty() ? generated_run_id() : options.run_id;
  std::string spec = options.store;
  if (spec.empty()) {
    const char* tmp = std::getenv("TMPDIR");
    spec = std::string("file:") + (tmp != nullptr ? tmp : "/tmp") + "/ntp-store";
  }
  NTP_ASSIGN_OR_RETURN(std::shared_ptr<comm::Store> store, comm::open_store(spec, run_id));
  std::string password;
  const std::string worker_store = strip_password(spec, &password);

  struct sigaction action {};
  action.sa_handler = on_stop_signal;
  sigemptyset(&action.sa_mask);
  struct sigaction old_int {};
  struct sigaction old_term {};
  ::sigaction(SIGINT, &action, &old_int);
  ::sigaction(SIGTERM, &action, &old_term);
  g_stop_signal = 0;

  // Orphans of the workers (a worker's children once it died) are reparented to the launcher,
  // which reaps them: it returns only when every process of every worker group is gone.
  int old_subreaper = 0;
  ::prctl(PR_GET_CHILD_SUBREAPER, &old_subreaper);
  ::prctl(PR_SET_CHILD_SUBREAPER, 1);
  Launcher launcher(options, node, store, spec, worker_store, password, run_id);
  const int code = launcher.run();
  ::prctl(PR_SET_CHILD_SUBREAPER, old_subreaper);
  if (options.store.empty()) {
    // The default store is private to this launch: leave nothing behind in $TMPDIR.
    std::error_code ec;
    std::filesystem::remove_all(spec.substr(5) + "/" + run_id, ec);
  }

  ::sigaction(SIGINT, &old_int, nullptr);
  ::sigaction(SIGTERM, &old_term, nullptr);
  return code;
}

}  // namespace ntp::elastic
