// The training loop of one worker. Read it top to bottom: job setup from the layout algebra, then
// one step = data -> forward/backward with overlapped sync -> wait -> loss and norm -> clip ->
// optimizer -> commit -> metrics -> eval.
#include "train/trainer.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>

#include <nlohmann/json.hpp>

#include "checkpoint/checkpoint_dir.h"
#include "comm/exit_notice.h"
#include "comm/gloo_communicator.h"
#include "comm/survivors.h"
#include "comm/wait_observer.h"
#include "elastic/agreement.h"
#include "elastic/failure_watch.h"
#include "elastic/member_list.h"
#include "elastic/progress.h"
#include "kernels/cpu/clip.h"
#include "model/comm_tp_group.h"
#include "model/gpt_model.h"
#include "power/boost_planner.h"
#include "power/power_control.h"
#include "shard/balance.h"
#include "shard/fold_sync_strategy.h"
#include "shard/native_sync_strategy.h"
#include "train/adamw_optimizer.h"
#include "train/batcher.h"
#include "train/event_log.h"
#include "train/fault_point.h"
#include "train/layout_codec.h"
#include "train/sharded_adamw.h"
#include "train/state_reshard.h"
#include "train/token_file.h"
#include "train/train_checkpoint.h"
#include "train/train_report.h"
#include "train/unit_blocks.h"
#include "train/worker_role.h"

namespace ntp::train {
namespace {

using Clock = std::chrono::steady_clock;

// Liveness: every worker beats every 100 ms; one still for --hang-detect-ms is hung (or dead).
// The failure watch polls the store every 20 ms (elastic/failure_watch.h).
constexpr std::chrono::milliseconds kHeartbeatPeriod{100};
constexpr std::chrono::milliseconds kWatchPoll{20};
// Store errors one re-formation's agreement may meet before the job gives up on the store.
constexpr int kAgreementStoreRetries = 5;

double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

std::unique_ptr<shard::SyncStrategy> make_strategy(const TrainConfig& c) {
  if (c.strategy == "native") return std::make_unique<shard::NativeSyncStrategy>(c.tp);
  return std::make_unique<shard::FoldSyncStrategy>();
}

// Everything one cluster layout implies for this worker. Members are destroyed in reverse order:
// the executor (which uses the communicators and the model's tensors) goes first.
// Everything one cluster layout implies for this worker. Members are destroyed in reverse order:
// the executor (which uses the communicators and the model's tensors) goes first.
struct Job {
  int epoch = 0;  // the membership epoch it was built for
  shard::ClusterLayout layout;
  WorkerRole role;
  // Set by abort_all: a rendezvous of this job in progress ends, later ones do not start.
  std::shared_ptr<std::atomic<bool>> cancel = std::make_shared<std::atomic<bool>>(false);
  std::mutex comms_mutex;  // abort_all (the watch's thread) against installing communicators
  std::unique_ptr<comm::Communicator> world, tp, replica;
  std::vector<std::unique_ptr<comm::Communicator>> dp;
  std::unique_ptr<model::CommTpGroup> tp_group;
  std::optional<model::GptModel> model;
  std::unique_ptr<SyncExecutor> sync;
  std::optional<AdamWOptimizer> adamw;
  std::optional<ShardedAdamW> sharded;
  std::vector<ReplicaBatch> batches;  // [replica]

  // Breaks every communicator (peers blocked on this worker fail at once) and cancels a
  // rendezvous in progress.
  void abort_all(const std::string& reason) {
    cancel->store(true);
    std::lock_guard<std::mutex> lock(comms_mutex);
    for (auto& d : dp) {
      if (d) d->abort(reason);
    }
    if (replica) replica->abort(reason);
    if (tp) tp->abort(reason);
    if (world) world->abort(reason);
  }
  // Makes `c` one of the job's communicators (a job aborted meanwhile aborts it at once).
  comm::Communicator* install(std::unique_ptr<comm::Communicator>& slot,
                              std::unique_ptr<comm::Communicator> c) {
    std::lock_guard<std::mutex> lock(comms_mutex);
    if (cancel->load()) c->abort("the job was aborted while it was being built");
    slot = std::move(c);
    return slot.get();
  }
};

std::string slot_name(shard::SlotRef s) {
  return std::to_string(s.domain) + ":" + std::to_string(s.slot);
}

// The launcher's global ranks (domain * tp + slot) of the layout's active slots, increasing.
std::vector<int> slot_ranks(const shard::ClusterLayout& layout) {
  std::vector<int> out;
  for (const shard::SlotRef& s : active_slots(layout)) {
    out.push_back(s.domain * layout.spec.domain_size + s.slot);
  }
  return out;
}

// The state before the last optimizer update (replicated optimizer): a step that some survivors
// applied and others did not is taken back, so that every survivor continues from the same step.
// The state before the last optimizer update (replicated optimizer): a step that some survivors
// applied and others did not is taken back, so that every survivor continues from the same step.
// It belongs to the job it was saved from (an update in a new job saves it anew).
class UndoLog {
 public:
  void save(Job& job) {
    std::vector<model::Param>& params = job.model->params();
    values_.resize(params.size()), m_.resize(params.size()), v_.resize(params.size());
    for (size_t i = 0; i < params.size(); ++i) {
      values_[i].assign(params[i].value.span().begin(), params[i].value.span().end());
      m_[i] = job.adamw->exp_avg(i);
      v_[i] = job.adamw->exp_avg_sq(i);
    }
    steps_ = job.adamw->steps_taken();
    of_ = &job;
  }
  // Whether `job`'s last update can be taken back.
  bool holds(const Job& job) const { return of_ == &job; }
  void restore(Job& job) {
    NTP_CHECK(of_ == &job);
    std::vector<model::Param>& params = job.model->params();
    for (size_t i = 0; i < params.size(); ++i) {
      std::copy(values_[i].begin(), values_[i].end(), params[i].value.span().begin());
      job.adamw->exp_avg(i) = m_[i];
      job.adamw->exp_avg_sq(i) = v_[i];
    }
    job.adamw->set_steps_taken(steps_);
    of_ = nullptr;  // one update back, no more
  }

 private:
  std::vector<std::vector<float>> values_, m_, v_;
  int64_t steps_ = 0;
  const Job* of_ = nullptr;
};

// Which process each slot runs now, as the launcher names it in its exit notices (the restart
// counts of the member list: repairs raise them, announcements carry them).
std::vector<std::string> incarnations(int attempt, const elastic::MemberList& list) {
  std::vector<std::string> out;
  for (int restart : list.restarts) out.push_back(comm::incarnation(attempt, restart));
  return out;
}

// The layout of the job whose active slots are `members` (global ranks), keeping units where they
// are. failed_precondition, naming the replica, when one would run below --min-tp.
Result<shard::ClusterLayout> next_layout(const TrainConfig& c, const shard::SyncStrategy& strategy,
                                         const shard::ClusterLayout& previous,
                                         const std::vector<int>& members) {
  shard::ClusterSpec spec = previous.spec;
  spec.failed.clear();
  for (int r = 0; r < c.world_slots(); ++r) {
    if (!std::binary_search(members.begin(), members.end(), r)) {
      spec.failed.push_back({r / c.tp, r % c.tp});
    }
  }
  Result<shard::ClusterLayout> layout = shard::plan_cluster(spec, strategy, &previous);
  if (!layout.ok()) {
    return failed_precondition("the job cannot go on: " + layout.status().message() +
                               "; the last checkpoint stays intact");
  }
  return layout;
}

// Repairs: a replacement worker (NTP_RESTART_COUNT > 0) writes "<group>/join/<rank>" = its
// restart count and waits; world rank 0 of the job looks for such keys at every step boundary and
// tells everyone (a broadcast), then writes "<group>/admit/<rank>/<restart>" = the members' last
// member list, from which the joiner enters the same agreement as the members.
std::string join_key(const std::string& group, int rank) {
  return group + "/join/" + std::to_string(rank);
}

Result<std::vector<int>> pending_joiners(const WorkerContext& ctx, const std::string& group,
                                         Job& job) {
  const int slots = job.layout.spec.domains * job.layout.spec.domain_size;
  std::vector<int32_t> flags(static_cast<size_t>(slots), 0);
  if (job.role.world_rank == 0) {
    const std::vector<int> members = slot_ranks(job.layout);
    for (int r = 0; r < slots; ++r) {
      if (std::binary_search(members.begin(), members.end(), r)) continue;
      // Pending: a join request whose restart count was not admitted yet.
      Result<std::string> asked = ctx.store->get(join_key(group, r));
      if (!asked.ok()) continue;
      Result<std::string> taken = ctx.store->get(join_key(group, r) + "/taken");
      if (taken.ok() && *taken == *asked) continue;
      flags[static_cast<size_t>(r)] = 1;
    }
  }
  NTP_RETURN_IF_ERROR(job.world->broadcast(comm::view(flags), 0));
  std::vector<int> out;
  for (int r = 0; r < slots; ++r) {
    if (flags[static_cast<size_t>(r)] != 0) out.push_back(r);
  }
  return out;
}

Status admit(const WorkerContext& ctx, const std::string& group, const std::vector<int>& joiners,
             const elastic::MemberList& last) {
  const std::string text = elastic::encode(last);
  for (int r : joiners) {
    NTP_ASSIGN_OR_RETURN(std::string restart, ctx.store->get(join_key(group, r)));
    NTP_RETURN_IF_ERROR(
        ctx.store->set(group + "/admit/" + std::to_string(r) + "/" + restart, text));
    NTP_RETURN_IF_ERROR(ctx.store->set(join_key(group, r) + "/taken", restart));
  }
  return ok_status();
}

// A joiner's wait: the members' last list once world rank 0 admitted it.
Result<elastic::MemberList> wait_for_admission(const WorkerContext& ctx, const std::string& group,
                                               elastic::Progress& progress) {
  const std::string restart = std::to_string(ctx.restart_count);
  NTP_RETURN_IF_ERROR(ctx.store->set(join_key(group, ctx.slot_rank), restart));
  const std::string key = group + "/admit/" + std::to_string(ctx.slot_rank) + "/" + restart;
  const Clock::time_point start = Clock::now();
  while (true) {
    progress.mark(elastic::Phase::kJoin, -1);
    Result<std::string> text = ctx.store->get(key);
    if (text.ok()) return elastic::decode_member_list(*text);
    if (Result<bool> finished = ctx.store->exists(group + "/finished");
        finished.ok() && *finished) {
      return Status(StatusCode::kAborted, "the job finished before this repair was admitted");
    }
    if (seconds_since(start) > 600) return unavailable("not admitted within 10 minutes");
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
}

// kDrawn: the model's initial weights (a new job); kFilledByCaller: zeros, because the caller
// moves the state in at once (a re-formation's reshard, or a checkpoint).
enum class InitialState { kDrawn, kFilledByCaller };

// Builds `job` (made by the caller, so that a failure watch can abort it while it connects) for
// `layout` and `slot`: communicators named by `epoch` (a new one after every membership change),
// the model shard, the sync executor and the optimizer.
Status build_job(Job& job_ref, const TrainConfig& c, const WorkerContext& ctx,
                 shard::ClusterLayout layout, shard::SlotRef slot, int epoch, InitialState state) {
  Job* job = &job_ref;
  job->epoch = epoch;
  job->layout = std::move(layout);
  NTP_ASSIGN_OR_RETURN(job->role, worker_role(job->layout, slot));
  const WorkerRole& role = job->role;

  comm::GlooOptions gloo;
  gloo.store = ctx.store;
  gloo.rank = role.world_rank;
  gloo.size = role.world_size;
  gloo.prefix = "train/a" + std::to_string(ctx.attempt) + "/e" + std::to_string(epoch);
  gloo.timeout = std::chrono::milliseconds(c.comm_timeout_ms);
  gloo.cancel = job->cancel;
  if (!ctx.local_addr.empty()) gloo.hostname = ctx.local_addr;
  NTP_ASSIGN_OR_RETURN(std::unique_ptr<comm::Communicator> world, comm::connect_gloo(gloo));
  job->install(job->world, std::move(world));
  const std::string d = std::to_string(role.replica);
  NTP_ASSIGN_OR_RETURN(std::unique_ptr<comm::Communicator> tp,
                       job->world->subgroup(role.replica_members(), "tp" + d));
  job->install(job->tp, std::move(tp));
  NTP_ASSIGN_OR_RETURN(std::unique_ptr<comm::Communicator> replica,
                       job->world->subgroup(role.replica_members(), "sync" + d));
  job->install(job->replica, std::move(replica));
  SyncComms comms;
  comms.replica = job->replica.get();
  for (const DpSet& set : role.dp_sets) {
    NTP_ASSIGN_OR_RETURN(std::unique_ptr<comm::Communicator> dp,
                         job->world->subgroup(set.world_ranks, set.name));
    {
      std::lock_guard<std::mutex> lock(job->comms_mutex);
      job->dp.emplace_back();
    }
    comms.dp.push_back(job->install(job->dp.back(), std::move(dp)));
  }

  job->tp_group = std::make_unique<model::CommTpGroup>(*job->tp);
  NTP_ASSIGN_OR_RETURN(model::GptModel model,
                       model::GptModel::create(c.model, role.shard, c.seed, job->tp_group.get(),
                                               state == InitialState::kDrawn));
  job->model.emplace(std::move(model));
  job->sync =
      std::make_unique<SyncExecutor>(role, job->model->params(), job->model->grads_ready_order(),
                                     comms, SyncOptions{c.bucket_bytes, c.optimizer});

  const kernels::cpu::AdamWHyper hyper{
      .lr = c.lr, .beta1 = c.beta1, .beta2 = c.beta2, .eps = c.eps, .weight_decay = c.weight_decay};
  if (c.optimizer == OptimizerSharding::kSharded) {
    NTP_ASSIGN_OR_RETURN(std::vector<std::vector<float>> master, job->sync->owned_values());
    job->sharded.emplace(std::move(master), hyper);
  } else {
    job->adamw.emplace(job->model->params(), hyper);
  }
  NTP_ASSIGN_OR_RETURN(job->batches, split_global_batch(c.batch_policy, role.replica_degrees, c.tp,
                                                        c.global_batch(), c.micro_batch));
  return ok_status();
}

// Writes every parameter as its logical tensor (NaN where this rank holds nothing): the reduced
// gradients after the first step's sync (`grads`), or the weights. Testing aid (--dump-dir).
Status dump_logical(const std::string& path, Job& job, bool grads) {
  const std::vector<model::Param>& params = job.model->params();
  std::vector<std::vector<float>> logical;
  for (const model::Param& p : params) {
    logical.emplace_back(static_cast<size_t>(shape_numel(p.logical_shape)), NAN);
  }
  auto scatter = [&](int index, const shard::IntervalSet& units, const float* data) {
    const model::Param& p = params[static_cast<size_t>(index)];
    const ParamGeometry g = ParamGeometry::of(p);
    model::Param view;
    view.logical_shape = p.logical_shape;
    view.shard_axis = p.replicated() ? 0 : p.shard_axis;
    view.logical_index = slice_ids(p, g, units);
    const auto n = static_cast<size_t>(g.outer * units.count() * g.inner);
    view.scatter_to_logical(std::span<const float>(data, n), logical[static_cast<size_t>(index)]);
  };
  if (grads && job.sharded) {
    for (const OwnedChunk& chunk : job.sync->owned_chunks()) {
      for (const Block& b : chunk.layout.blocks())
        scatter(b.param, b.units, chunk.grad.data() + b.offset);
    }
  } else {
    for (size_t i = 0; i < params.size(); ++i) {
      const model::Param& p = params[i];
      p.scatter_to_logical(grads ? p.grad.span() : p.value.span(), logical[i]);
    }
  }
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  for (const std::vector<float>& t : logical) {
    out.write(reinterpret_cast<const char*>(t.data()),
              static_cast<std::streamsize>(t.size() * sizeof(float)));
  }
  return out ? ok_status() : unavailable("cannot write " + path);
}

Result<std::shared_ptr<const std::vector<uint16_t>>> load_tokens(const std::string& path,
                                                                 const char* flag) {
  Result<std::vector<uint16_t>> tokens = read_token_file(path);
  if (!tokens.ok()) {
    return invalid_argument(std::string(flag) + " " + path + ": " + tokens.status().message() +
                            (tokens.status().code() == StatusCode::kNotFound
                                 ? " (scripts/setup.sh prepares the fortunes corpus in data/)"
                                 : ""));
  }
  return std::make_shared<const std::vector<uint16_t>>(std::move(*tokens));
}

// Mean loss over a fixed held-out set: `eval_samples` sequences split over the replicas.
Result<double> evaluate(const TrainConfig& c, Job& job, const Batcher& val) {
  const WorkerRole& role = job.role;
  const int64_t n = shard::balanced_count(c.eval_samples, role.replicas, role.replica);
  const int64_t begin = shard::balanced_offset(c.eval_samples, role.replicas, role.replica);
  double weighted = 0.0;
  for (int64_t k = 0; k < n; k += c.micro_batch) {
    const int64_t m = std::min(c.micro_batch, n - k);
    NTP_ASSIGN_OR_RETURN(Batch batch, val.get(0, begin + k, m));
    NTP_ASSIGN_OR_RETURN(double loss,
                         job.model->loss(batch.tokens, batch.targets, m, c.model.n_ctx));
    weighted += loss * static_cast<double>(m) / static_cast<double>(c.eval_samples);
  }
  std::vector<double> slots(static_cast<size_t>(role.world_size), 0.0);
  if (role.tp_rank == 0) slots[static_cast<size_t>(role.world_rank)] = weighted;
  NTP_RETURN_IF_ERROR(job.world->allreduce(comm::view(slots)));
  double total = 0.0;
  for (double s : slots) total += s;  // one contributor per slot: exact, same on every rank
  return total;
}

// The whole job's reshard (every member calls it, joiners too): bytes moved between slots, and
// the slowest rank's time.
struct ReshardTotals {
  int64_t bytes = 0, busiest_rank_bytes = 0;
  double slowest_s = 0.0;
};
Result<ReshardTotals> reshard_totals(comm::Communicator& world, int64_t bytes, double seconds) {
  const std::vector<double> mine{static_cast<double>(bytes), seconds};
  std::vector<double> all(2 * static_cast<size_t>(world.size()));
  NTP_RETURN_IF_ERROR(world.allgather(comm::const_view(mine), comm::view(all),
                                      std::vector<size_t>(all.size() / 2, 2)));
  ReshardTotals totals;
  for (size_t r = 0; r < all.size(); r += 2) {
    totals.bytes += static_cast<int64_t>(all[r]);
    totals.busiest_rank_bytes = std::max(totals.busiest_rank_bytes, static_cast<int64_t>(all[r]));
    totals.slowest_s = std::max(totals.slowest_s, all[r + 1]);
  }
  return totals;
}

// Loads the job's latest committed checkpoint in --save-dir into `job` (the same one on every
// rank: the leader picks it). nullopt when there is none.
Result<std::optional<int64_t>> load_latest_checkpoint(const TrainConfig& c, Job& job) {
  std::vector<int64_t> step{-1};
  if (job.role.world_rank == 0 && !c.save_dir.empty()) {
    const std::vector<int64_t> steps = checkpoint::complete_steps(c.save_dir);
    if (!steps.empty()) step[0] = steps.back();
  }
  NTP_RETURN_IF_ERROR(job.world->broadcast(comm::view(step), 0));
  if (step[0] < 0) return std::optional<int64_t>();
  NTP_ASSIGN_OR_RETURN(
      checkpoint::CheckpointReader reader,
      checkpoint::CheckpointReader::open(checkpoint::step_dir_path(c.save_dir, step[0])));
  WorkerState state{job.role, job.model->params(), job.adamw ? &*job.adamw : nullptr,
                    job.sharded ? &*job.sharded : nullptr, job.sync.get()};
  NTP_ASSIGN_OR_RETURN(int64_t loaded, load_checkpoint(reader, c, state));
  return std::optional<int64_t>(loaded);
}

// Power boosting (batch policy keep): a degraded replica runs at `speed` of a healthy one
// (largest per-rank units at the full degree over its own, worst space); the planner picks the
// least boost that buys the speed back within the rack budget, and `control` applies it. Called
// by the leader whenever the layout changes; healthy replicas go back to 1 x TDP.
void plan_power(const shard::ClusterLayout& layout, power::PowerControl& control,
                std::optional<TrainReport>& report) {
  const power::PowerModel model;
  for (const shard::ReplicaLayout& r : layout.replicas) {
    double speed = 1.0;
    for (size_t sp = 0; sp < layout.spec.spaces.size(); ++sp) {
      const int64_t full =
          shard::max_units_per_rank(layout.spec.spaces[sp].units, layout.spec.domain_size);
      speed = std::min(speed, static_cast<double>(full) /
                                  static_cast<double>(r.max_units(static_cast<int>(sp))));
    }
    power::DomainPowerSpec spec;
    spec.surviving_gpus = r.degree();
    const power::BoostPlan plan = power::plan_boost(model, speed, spec);
    if (control.current(r.domain) == plan.power_factor) continue;  // unchanged
    if (control.set_domain_power(r.domain, plan.power_factor).ok() && report) {
      report->power(r.domain, r.degree(), speed, plan);
    }
  }
}

// One worker's run of the job: its part of the recovery protocol (progress in its heartbeat, the
// failure watch, the agreement), the job it holds and the base state it kept, its steps and its
// checkpoints. run_training (below) is the step loop; train_step one step; reform the
// re-formation, which executes the protocol's decisions (elastic/member_list.h). Members are
// destroyed in reverse order: the watch, whose aborts reach the jobs, stops before the jobs go;
// the heartbeat, which reads the progress, before the progress.
struct LiveRun {
  LiveRun(const TrainConfig& config, const WorkerContext& context, Batcher train, Batcher val);
  ~LiveRun() { comm::observe_waits(nullptr); }
  LiveRun(const LiveRun&) = delete;
  LiveRun& operator=(const LiveRun&) = delete;

  // The first job (or a repair's admission and join), then a resume from a checkpoint.
  // nullopt: ready to train; else the summary of a worker that leaves without training.
  Result<std::optional<TrainSummary>> start();
  Result<TrainSummary> run();  // the step loop, then the last checkpoint and the summary

  void watch_job(Job& j, const elastic::MemberList& list);
  Status open_report(bool append);
  WorkerState worker_state();
  Status finish_pending_save();
  Status save_checkpoint_now();
  Status stop_job(const std::string& why, bool speaks);
  Status train_step(int64_t step);
  Result<int64_t> reform(const Status& cause, const std::vector<int>& joiners, double detect_s);
  struct MovedState {
    int64_t step = 0;  // the step the moved state is at
    ReshardTotals totals;
  };
  Result<MovedState> move_state(const elastic::MemberList& list, Job* source,
                                const shard::ClusterLayout& from, Job& next, RecoveryEvent& event);
  Status report_reformed(const elastic::MemberList& list, const MovedState& state,
                         const std::vector<int>& old_degrees, Clock::time_point t0,
                         RecoveryEvent& event);
  void reform_fault_point(const char* phase, const elastic::MemberList& list);
  TrainSummary left_job(const Status& why);
  static bool ends_job(const Status& s) {
    return s.code() == StatusCode::kAborted || s.code() == StatusCode::kFailedPrecondition;
  }
  static bool peer_failure(const Status& s) { return s.code() == StatusCode::kUnavailable; }

  const TrainConfig& c;
  const WorkerContext& ctx;
  const shard::SlotRef slot;
  TrainSummary summary;
  Batcher train_batches, val_batches;
  const Clock::time_point run_start = Clock::now();
  const std::unique_ptr<shard::SyncStrategy> strategy;
  const std::string group;
  const std::chrono::milliseconds hang_detect;
  elastic::Progress progress;  // the training thread's, carried in the heartbeat
  comm::Heartbeat heartbeat;
  EventLog events;  // this worker's detections and decisions
  // The job of the last epoch this worker completed, and the state a re-formation started from
  // (kept until the new epoch is proven complete by its first world all-reduce).
  std::unique_ptr<Job> job, base;
  elastic::FailureWatch watch;
  elastic::Agreement agreement;
  elastic::MemberList last;  // the newest member list this worker received
  std::optional<TrainReport> report;
  power::RecordingPowerControl power_control;  // CPU: records what the planner asks for
  const bool boost;
  // Checkpoints: the save started at the end of the previous step is committed at the end of
  // the next one (its write had a step to run); `saved_step` is the last committed save's step.
  CheckpointSaver saver;
  int64_t saved_step = -1;
  int64_t first_step = 0, last_step = 0;
  int64_t committed = 0;  // steps whose update this worker has applied
  UndoLog undo;           // the state before the last update (live recovery)
  const int64_t global_batch;
  const float micro_scale;
  double timed_seconds = 0.0;
  int64_t timed_steps = 0;
  bool stop_speaks = false;
};

elastic::AgreementConfig agreement_config(const TrainConfig& c, const WorkerContext& ctx,
                                          const std::string& group, elastic::Progress* progress) {
  elastic::AgreementConfig a;
  a.store = ctx.store;
  a.group = group;
  a.me = ctx.slot_rank;
  a.progress = progress;
  a.hang_detect = std::chrono::milliseconds(c.hang_detect_ms);
  a.window = 10 * a.hang_detect;
  // A member's incarnation is the list's; a joiner's is the one its join request names (its
  // predecessor's exit notice must not mark it gone).
  a.exited = [&ctx, group](int id, const elastic::MemberList& list) {
    int restart = list.restarts[static_cast<size_t>(id)];
    if (!list.has(id)) {
      Result<std::string> asked = ctx.store->get(join_key(group, id));
      if (asked.ok()) restart = std::atoi(asked->c_str());
    }
    return comm::has_exited(*ctx.store, id, comm::incarnation(ctx.attempt, restart));
  };
  // The agreement's fault points are the decider's: for its rank, or its role.
  a.on_phase = [](const char* phase, int epoch) {
    fault_point(phase);
    fault_point(phase, ("decider@" + std::to_string(epoch)).c_str());
  };
  return a;
}

LiveRun::LiveRun(const TrainConfig& config, const WorkerContext& context, Batcher train,
                 Batcher val)
    : c(config),
      ctx(context),
      slot{context.slot_rank / config.tp, context.slot_rank % config.tp},
      train_batches(std::move(train)),
      val_batches(std::move(val)),
      strategy(make_strategy(config)),
      group("train/a" + std::to_string(context.attempt)),
      hang_detect(config.hang_detect_ms),
      heartbeat(context.store, group, context.slot_rank, kHeartbeatPeriod,
                [this] { return progress.token(); }),
      events(config.out_dir, context.slot_rank),
      watch(
          context.store, kWatchPoll, hang_detect, &progress,
          [this] {
            events.log("fenced", {{"reason", "declared dead while its training thread was stuck"}});
            std::printf(
                "slot %s: declared dead while its training thread was stuck; it leaves the job\n",
                slot_name(slot).c_str());
            std::fflush(stdout);
            std::_Exit(1);
          }),
      agreement(agreement_config(config, context, group, &progress)),
      boost(config.batch_policy == BatchPolicy::kKeep),
      saver(config.save_dir, config.keep_last,
            "d" + std::to_string(slot.domain) + "s" + std::to_string(slot.slot)),
      global_batch(config.global_batch()),
      micro_scale(static_cast<float>(config.micro_batch) /
                  static_cast<float>(config.global_batch())) {
  progress.mark(elastic::Phase::kSetup, -1);
  comm::observe_waits(&progress);  // this thread's waits on its peers are not stuck work
}

// From here on, a fault anywhere in the job aborts this worker's pending operations at once.
void LiveRun::watch_job(Job& j, const elastic::MemberList& list) {
  watch.arm({group, j.epoch, ctx.slot_rank, list.members, incarnations(ctx.attempt, list),
             [&j, this](const std::string& reason) {
               events.log("step_failed", {{"by", "watch"}, {"reason", reason}});
               j.abort_all(reason);
             }});
}

Status LiveRun::open_report(bool append) {
  if (report || !job || job->role.world_rank != 0) return ok_status();
  NTP_ASSIGN_OR_RETURN(report, TrainReport::open(c, job->layout, job->batches, ctx.out, append));
  return ok_status();
}

WorkerState LiveRun::worker_state() {
  return WorkerState{job->role, job->model->params(), job->adamw ? &*job->adamw : nullptr,
                     job->sharded ? &*job->sharded : nullptr, job->sync.get()};
}

Status LiveRun::finish_pending_save() {
  if (!saver.pending()) return ok_status();
  progress.mark(elastic::Phase::kCheckpoint, committed);
  const int64_t step = saver.pending_step();
  NTP_ASSIGN_OR_RETURN(std::string dir, saver.finish(*job->world));
  progress.mark(elastic::Phase::kStep, committed);
  saved_step = step;
  if (report) report->checkpoint(step, dir, saver.last_blocked_s());
  return ok_status();
}

// A save of the committed state, written and committed before returning.
Status LiveRun::save_checkpoint_now() {
  NTP_RETURN_IF_ERROR(finish_pending_save());
  if (saved_step == committed) return ok_status();
  WorkerState state = worker_state();
  const std::vector<checkpoint::PieceView> pieces = checkpoint_pieces(state);
  NTP_RETURN_IF_ERROR(saver.start(
      checkpoint_meta(c, committed, state.optimizer_steps(), job->layout.spec.failed), pieces));
  return finish_pending_save();
}

// Live recovery cannot go on: every survivor stops, one says why (kFailedPrecondition).
Status LiveRun::stop_job(const std::string& why, bool speaks) {
  stop_speaks = speaks;
  return failed_precondition(why);
}

Result<std::optional<TrainSummary>> LiveRun::start() {
  if (ctx.restart_count > 0) {
    // ---- a repair: wait to be admitted at a step boundary, then join through the same
    //      re-formation as any member, holding nothing ----
    Result<elastic::MemberList> admitted = wait_for_admission(ctx, group, progress);
    if (!admitted.ok()) {
      if (admitted.status().code() != StatusCode::kAborted) return admitted.status();
      summary.took_part = false;
      summary.left = admitted.status().message();
      return std::optional<TrainSummary>(summary);
    }
    last = std::move(*admitted);
    if (!c.dump_dir.empty()) std::filesystem::create_directories(c.dump_dir);
    Result<int64_t> joined = reform(ok_status(), {}, 0.0);
    if (!joined.ok() && ends_job(joined.status())) {
      return std::optional<TrainSummary>(left_job(joined.status()));
    }
    NTP_ASSIGN_OR_RETURN(first_step, std::move(joined));
    committed = first_step;
    last_step = c.stop_after > 0 ? std::min(c.steps, first_step + c.stop_after) : c.steps;
    events.log("joined", {{"step", first_step}, {"epoch", job->epoch}});
    std::printf("slot %s: repaired, joined at step %lld (epoch %d)\n", slot_name(slot).c_str(),
                static_cast<long long>(first_step + 1), job->epoch);
    std::fflush(stdout);
    return std::optional<TrainSummary>();
  }
  // ---- the first job: layout -> this worker's role -> communicators, model shard, sync,
  //      optimizer ----
  NTP_ASSIGN_OR_RETURN(shard::ClusterLayout layout,
                       shard::plan_cluster(cluster_spec(c), *strategy));
  last = elastic::initial_list(slot_ranks(layout), c.world_slots());
  job = std::make_unique<Job>();
  watch_job(*job, last);
  NTP_RETURN_IF_ERROR(build_job(*job, c, ctx, std::move(layout), slot, 0, InitialState::kDrawn));
  NTP_RETURN_IF_ERROR(open_report(!c.resume.empty()));
  if (boost && report) plan_power(job->layout, power_control, report);
  if (!c.dump_dir.empty()) std::filesystem::create_directories(c.dump_dir);

  // ---- resume: weights, moments and the step from a checkpoint written at any layout ----
  std::string resume_dir = c.resume;
  if (resume_dir == "auto") {
    resume_dir = checkpoint::latest_step_dir(c.save_dir).ok() ? c.save_dir : "";
  }
  if (!resume_dir.empty()) {
    Result<checkpoint::CheckpointReader> reader = checkpoint::CheckpointReader::open(resume_dir);
    if (!reader.ok()) {
      return invalid_argument("--resume " + resume_dir + ": " + reader.status().message());
    }
    WorkerState state = worker_state();
    NTP_ASSIGN_OR_RETURN(first_step, load_checkpoint(*reader, c, state));
    events.log("restored", {{"step", first_step}, {"epoch", 0}});
    if (report) report->resumed(first_step, reader->step_dir().string());
  }
  committed = first_step;
  last_step = c.stop_after > 0 ? std::min(c.steps, first_step + c.stop_after) : c.steps;
  return std::optional<TrainSummary>();
}

// One training step on the current job. Any error of a peer surfaces as kUnavailable.
Status LiveRun::train_step(int64_t step) {
  const WorkerRole& role = job->role;
  model::GptModel& model = *job->model;
  SyncExecutor& sync = *job->sync;
  const ReplicaBatch& mine = job->batches[static_cast<size_t>(role.replica)];
  const Clock::time_point step_start = Clock::now();
  const elastic::Phase phase =
      step == first_step ? elastic::Phase::kFirstStep : elastic::Phase::kStep;
  progress.mark(phase, step);
  set_fault_step(step);
  fault_point("forward");

  // ---- forward + backward over this replica's micro-batches; the sync of each bucket starts
  //      as soon as the last micro-batch's backward has finished it ----
  model.zero_grad();
  double replica_loss = 0.0;
  for (int64_t k = 0; k < mine.micro_batches; ++k) {
    NTP_ASSIGN_OR_RETURN(Batch batch,
                         train_batches.get(step, mine.begin + k * c.micro_batch, c.micro_batch));
    model::BackwardOptions backward;
    backward.loss_scale = micro_scale;
    if (k + 1 == mine.micro_batches) {
      backward.on_grads_ready = [&sync](std::span<const int> ready) {
        fault_point("backward");
        sync.grads_ready(ready);
      };
    }
    NTP_ASSIGN_OR_RETURN(double loss,
                         model.forward_backward(batch.tokens, batch.targets, c.micro_batch,
                                                c.model.n_ctx, backward));
    progress.mark(phase, step);
    replica_loss += loss / static_cast<double>(mine.micro_batches);
  }
  const double fwd_bwd_s = seconds_since(step_start);

  // ---- wait for the sync still in flight ----
  const Clock::time_point wait_start = Clock::now();
  fault_point("wait");
  NTP_RETURN_IF_ERROR(sync.wait());
  progress.mark(phase, step);
  const double sync_wait_s = seconds_since(wait_start);
  if (step == 0 && !c.dump_dir.empty()) {
    NTP_RETURN_IF_ERROR(dump_logical(
        c.dump_dir + "/grads_rank" + std::to_string(ctx.slot_rank) + ".bin", *job, true));
  }

  // ---- global loss and gradient norm: one float64 allreduce, one contributor per slot, so
  //      every rank of every replica gets bit-identical values ----
  std::vector<double> slots(2 * static_cast<size_t>(role.world_size), 0.0);
  slots[2 * static_cast<size_t>(role.world_rank)] = sync.accounted_sum_of_squares();
  if (role.tp_rank == 0) {
    slots[2 * static_cast<size_t>(role.world_rank) + 1] =
        replica_loss * static_cast<double>(mine.samples) / static_cast<double>(global_batch);
  }
  NTP_RETURN_IF_ERROR(job->world->allreduce(comm::view(slots)));
  // Every member of this epoch has entered this step, so every one finished the re-formation
  // that made it: the state it started from is needed no more.
  base.reset();
  progress.mark(phase, step);
  double sum_of_squares = 0.0, loss = 0.0;
  for (size_t r = 0; r < slots.size(); r += 2) {
    sum_of_squares += slots[r];
    loss += slots[r + 1];
  }
  const double grad_norm = std::sqrt(sum_of_squares);

  // ---- clip + optimizer (the previous state kept, so a step that not every survivor
  //      applied can be taken back) ----
  const Clock::time_point opt_start = Clock::now();
  fault_point("optimizer");
  if (fault_point_fails("optimizer")) {  // this member fails where the others go on: a split
    job->abort_all("fault point: a failure in the optimizer");
    return unavailable("fault point: a failure in the optimizer of step " + std::to_string(step));
  }
  const float clip =
      c.grad_clip > 0.0 ? kernels::cpu::clip_coefficient(grad_norm, c.grad_clip) : 1.0f;
  const float lr = warmup_cosine_lr(step, c.warmup, c.steps, c.lr, c.min_lr);
  if (job->sharded) {
    job->sharded->step(sync.owned_chunks(), model.params(), lr, clip);
    NTP_RETURN_IF_ERROR(sync.publish_values(job->sharded->master()));
  } else {
    if (c.live_recovery) undo.save(*job);  // a job without live recovery never rolls back
    job->adamw->step(model.params(), lr, clip);
  }
  const double optimizer_s = seconds_since(opt_start);

  // ---- commit: this worker applied step `step` ----
  fault_point("commit");
  committed = step + 1;
  events.log("applied", {{"step", step}, {"epoch", job->epoch}});
  progress.mark(phase, step);
  summary.steps = committed;
  summary.final_loss = loss;

  // ---- metrics: per-rank figures to the leader ----
  std::vector<double> figures(kRankFigures * static_cast<size_t>(role.world_size), 0.0);
  const SyncStats& stats = sync.stats();
  const RankFigures my_figures{fwd_bwd_s, sync_wait_s, optimizer_s, stats.overlap_fraction(),
                               static_cast<double>(stats.fold_bytes_sent + stats.dp_bytes)};
  std::copy(
      my_figures.begin(), my_figures.end(),
      figures.begin() + static_cast<long>(kRankFigures * static_cast<size_t>(role.world_rank)));
  // The step is committed here; should a peer die in this all-reduce, the leader still logs
  // the step (with the figures it has) before the error starts a re-formation.
  const Status gathered = job->world->allreduce(comm::view(figures));
  if (!gathered.ok()) {  // what arrived is partial: keep only this worker's own figures
    std::fill(figures.begin(), figures.end(), 0.0);
    std::copy(
        my_figures.begin(), my_figures.end(),
        figures.begin() + static_cast<long>(kRankFigures * static_cast<size_t>(role.world_rank)));
  }
  const double step_s = seconds_since(step_start);
  if (step > first_step) {  // the first step pays for first touches of every buffer
    timed_seconds += step_s;
    ++timed_steps;
  }
  if (report) {
    report->step({step, loss, lr, grad_norm, clip, step_s,
                  static_cast<double>(global_batch * c.model.n_ctx) / step_s},
                 figures);
  }
  NTP_RETURN_IF_ERROR(gathered);

  // ---- checkpoint: commit the previous save (its write had a step to run), start this one ----
  const bool final_step = step + 1 == last_step;
  NTP_RETURN_IF_ERROR(finish_pending_save());
  if (!c.save_dir.empty() && ((c.save_every > 0 && (step + 1) % c.save_every == 0) || final_step)) {
    WorkerState state = worker_state();
    const std::vector<checkpoint::PieceView> pieces = checkpoint_pieces(state);
    progress.mark(elastic::Phase::kCheckpoint, step);
    NTP_RETURN_IF_ERROR(saver.start(
        checkpoint_meta(c, step + 1, state.optimizer_steps(), job->layout.spec.failed), pieces));
    fault_point("checkpoint");
    progress.mark(phase, step);
  }

  // ---- eval ----
  if ((c.eval_every > 0 && (step + 1) % c.eval_every == 0) || final_step) {
    progress.mark(elastic::Phase::kEval, step);
    NTP_ASSIGN_OR_RETURN(double eval_loss, evaluate(c, *job, val_batches));
    progress.mark(phase, step);
    summary.final_eval_loss = eval_loss;
    if (report) report->eval(step, eval_loss);
  }
  return ok_status();
}

// ---- re-formation (docs/recovery.md): after a failure, to admit repairs, or to join. Agree on
//      the next epoch's list (elastic/agreement.h); take back an update the others did not
//      apply, together with its step; plan from the published base; build the new job; move
//      the base state into it; mark the epoch done. A fault at any point gives the epoch up and
//      agrees on the next one, from what was published. Returns the step to continue at. ----
Result<int64_t> LiveRun::reform(const Status& cause, const std::vector<int>& joiners,
                                double detect_s) {
  const Clock::time_point t0 = Clock::now();
  RecoveryEvent event;
  event.detect_s = detect_s;
  event.cause = cause.ok() ? (job ? "repair" : "join") : cause.message();
  const bool sharded = c.optimizer == OptimizerSharding::kSharded;
  // ZeRO-1 moments exist once in the job: a lost rank's have no live copy, and the reshard
  // moves replicated state only. Such a job continues from its latest checkpoint; at a repair,
  // when every member is alive, it first saves one of the current step, so nothing is lost.
  if (job && sharded && cause.ok() && !c.save_dir.empty()) {
    NTP_RETURN_IF_ERROR(save_checkpoint_now());
  }
  watch.disarm();
  if (job) job->abort_all(cause.ok() ? "re-forming to admit repaired slots" : cause.message());
  saver.abandon();  // its records cannot all be gathered any more
  if (job && !joiners.empty() && job->role.world_rank == 0) {
    fault_point("admit");
    NTP_RETURN_IF_ERROR(admit(ctx, group, joiners, last));
  }
  const std::vector<int> old_degrees = job ? job->role.replica_degrees : std::vector<int>{};
  // A re-formation's fault points count as the step it re-forms before (any step, for a joiner).
  set_fault_step(job ? committed : -1);
  int store_errors = 0;
  for (;;) {
    progress.mark(elastic::Phase::kReform, committed);
    // -- agree --
    const bool joiner = job == nullptr;
    Result<elastic::MemberList> agreed =
        agreement.agree(last, {committed, ctx.restart_count}, joiner, joiners, [this] {
          NTP_CHECK(job && job->epoch == last.epoch);  // `last` complete: this member did it
          return encode_layout(job->layout);
        });
    if (!agreed.ok() && agreed.status().code() == StatusCode::kUnavailable &&
        ++store_errors < kAgreementStoreRetries) {
      // The store did not answer (an outage, a lock held by a stopped process): agree again.
      events.log("agreement_retry", {{"error", agreed.status().message()}});
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      continue;
    }
    if (!agreed.ok()) {
      if (agreed.status().code() == StatusCode::kAborted) {
        return Status(StatusCode::kAborted, "slot " + slot_name(slot) + " was declared dead (" +
                                                agreed.status().message() + "); it leaves the job");
      }
      return agreed.status();
    }
    const elastic::MemberList& list = *agreed;
    event.agree_s = seconds_since(t0);
    events.log("agreed", {{"epoch", list.epoch},
                          {"members", list.members},
                          {"base_epoch", list.base_epoch},
                          {"step", list.step}});
    reform_fault_point("reform_agreed", list);
    // -- the state this member re-forms from: the base epoch's, which it holds as its
    //    current job or as the base it kept; take back an update the others did not apply,
    //    together with the step it claims (ZeRO-1 reloads a checkpoint instead) --
    NTP_ASSIGN_OR_RETURN(
        elastic::ReformPlan plan,
        elastic::plan_reform(list, ctx.slot_rank, {job ? job->epoch : -1, base ? base->epoch : -1},
                             committed, sharded || (job && undo.holds(*job))));
    Job* source = plan.source_epoch < 0                    ? nullptr
                  : job && job->epoch == plan.source_epoch ? job.get()
                                                           : base.get();
    if (plan.roll_back && !sharded) {
      undo.restore(*source);
      committed = list.step;
      event.rolled_back = true;
      events.log("rolled_back", {{"step", list.step}, {"epoch", list.epoch}});
    }
    // -- plan from the published base --
    Result<shard::ClusterLayout> from_layout =
        source != nullptr          ? Result<shard::ClusterLayout>(source->layout)
        : list.base_layout.empty() ? shard::plan_cluster(cluster_spec(c), *strategy)
                                   : decode_layout(list.base_layout, cluster_spec(c), *strategy);
    NTP_RETURN_IF_ERROR(from_layout.status());
    Result<shard::ClusterLayout> layout = next_layout(c, *strategy, *from_layout, list.members);
    if (!layout.ok() && layout.status().code() == StatusCode::kFailedPrecondition) {
      return stop_job(layout.status().message(), list.members.front() == ctx.slot_rank);
    }
    NTP_RETURN_IF_ERROR(layout.status());
    reform_fault_point("reform_planned", list);
    // -- build the new job; its watch can cancel the rendezvous --
    const Clock::time_point t_build = Clock::now();
    auto next = std::make_unique<Job>();
    next->epoch = list.epoch;
    next->layout = *layout;
    watch_job(*next, list);
    reform_fault_point("reform_build", list);
    Status moved = build_job(*next, c, ctx, std::move(*layout), slot, list.epoch,
                             InitialState::kFilledByCaller);
    event.rebuild_s = seconds_since(t_build);
    // -- move the base state in, and exchange the totals --
    Result<MovedState> state = moved.ok() ? move_state(list, source, *from_layout, *next, event)
                                          : Result<MovedState>(moved);
    moved = state.status();
    if (moved.ok()) moved = agreement.mark_done(list.epoch);
    if (!moved.ok()) {
      watch.disarm();  // before `next` goes
      if (moved.code() != StatusCode::kUnavailable) return moved;
      events.log("step_failed", {{"epoch", list.epoch}, {"error", moved.message()}});
      agreement.report_failure(list.epoch);
      std::printf("slot %s: re-formation of epoch %d failed (%s); re-forming again\n",
                  slot_name(slot).c_str(), list.epoch, moved.message().c_str());
      std::fflush(stdout);
      continue;
    }
    // -- done: keep the base state until the new epoch proves complete (elastic::after_reform:
    //    the new job is current, the source is the base) --
    if (source == job.get()) base = std::move(job);
    if (source == nullptr) base.reset();
    job = std::move(next);
    NTP_CHECK(job->epoch == elastic::after_reform(list, plan).current);
    NTP_RETURN_IF_ERROR(report_reformed(list, *state, old_degrees, t0, event));
    return state->step;
  }
}

// Moves the base state (or, for ZeRO-1, the latest checkpoint) into `next`, then exchanges the
// reshard's totals. `source` holds the base epoch's state (null: this member receives all).
Result<LiveRun::MovedState> LiveRun::move_state(const elastic::MemberList& list, Job* source,
                                                const shard::ClusterLayout& from, Job& next,
                                                RecoveryEvent& event) {
  const Clock::time_point t_reshard = Clock::now();
  MovedState out{list.step, {}};
  int64_t moved_bytes = 0;
  reform_fault_point("reform_reshard", list);
  if (c.optimizer == OptimizerSharding::kSharded) {
    NTP_ASSIGN_OR_RETURN(std::optional<int64_t> loaded, load_latest_checkpoint(c, next));
    if (!loaded) {
      return stop_job(
          "the ZeRO-1 optimizer state of a lost rank has no live copy and --save-dir holds "
          "no checkpoint to fall back to; use --optimizer replicated, or --save-dir with "
          "--save-every, for live recovery; the job stops",
          next.role.world_rank == 0);
    }
    out.step = *loaded;
    event.state_from = "checkpoint";
    event.checkpoint_step = out.step;
    // Every update from `step` on is gone from this member's state (counted by tests).
    events.log("restored", {{"step", out.step}, {"epoch", list.epoch}});
  } else {
    HeldState held{source ? &source->model->params() : nullptr, source ? &*source->adamw : nullptr};
    NTP_ASSIGN_OR_RETURN(ReshardStats stats,
                         execute_state_reshard(from, next.layout, slot, source ? &held : nullptr,
                                               {&next.model->params(), &*next.adamw}, *next.world));
    next.adamw->set_steps_taken(out.step);
    moved_bytes = stats.bytes_received;
  }
  event.reshard_s = seconds_since(t_reshard);
  reform_fault_point("reform_commit", list);
  NTP_ASSIGN_OR_RETURN(out.totals, reshard_totals(*next.world, moved_bytes, event.reshard_s));
  return out;
}

// The re-formation's recovery event (the leader's metrics line) and power plan.
Status LiveRun::report_reformed(const elastic::MemberList& list, const MovedState& state,
                                const std::vector<int>& old_degrees, Clock::time_point t0,
                                RecoveryEvent& event) {
  event.total_s = seconds_since(t0);
  event.reshard_bytes = state.totals.bytes;
  event.reshard_busiest_rank_bytes = state.totals.busiest_rank_bytes;
  event.reshard_s = state.totals.slowest_s;
  event.step = state.step;
  event.steps_redone = committed - state.step;
  event.epoch = list.epoch;
  event.old_degrees = old_degrees.empty() ? job->role.replica_degrees : old_degrees;
  event.degrees = job->role.replica_degrees;
  committed = state.step;
  if (job->role.world_rank != 0) report.reset();  // one leader writes the metrics
  NTP_RETURN_IF_ERROR(open_report(true));
  if (report) report->recovery(event, job->layout, job->batches);
  if (boost && report) plan_power(job->layout, power_control, report);
  return ok_status();
}

// A fault point of a re-formation, for this worker's rank or its role in `list`.
void LiveRun::reform_fault_point(const char* phase, const elastic::MemberList& list) {
  fault_point(phase);
  if (list.decider == ctx.slot_rank) {
    fault_point(phase, ("decider@" + std::to_string(list.epoch)).c_str());
  }
}

// Ends the job as the re-formation said: fenced (this worker leaves, writing nothing), or
// stopped (live recovery cannot go on; every survivor stops, one says why).
TrainSummary LiveRun::left_job(const Status& why) {
  if (why.code() == StatusCode::kAborted) {
    summary.took_part = false;
    summary.fenced = true;
    summary.left = why.message();
    events.log("fenced", {{"reason", summary.left}});
  } else {
    summary.stopped = why.message();
    summary.speaks = stop_speaks;
    events.log("stopped", {{"reason", summary.stopped}});
  }
  watch.disarm();
  return summary;
}

Result<TrainSummary> LiveRun::run() {
  // ---- the loop: a failed step is redone on the re-formed job ----
  summary.steps = first_step;
  for (int64_t step = first_step; step < last_step;) {
    if (ctx.on_step) ctx.on_step(step);
    Result<std::vector<int>> joiners = pending_joiners(ctx, group, *job);
    Status status = joiners.status();
    const bool admitting = status.ok() && !joiners->empty();
    const Clock::time_point step_start = Clock::now();
    if (status.ok() && !admitting) status = train_step(step);
    if (status.ok() && !admitting) {
      ++step;
      continue;
    }
    if (!status.ok() && (!peer_failure(status) || !c.live_recovery)) return status;
    if (!status.ok()) {
      events.log("step_failed",
                 {{"step", step}, {"epoch", job->epoch}, {"error", status.message()}});
      agreement.report_failure(job->epoch);  // the members whose operations do not touch ours
      std::printf("slot %s: step %lld failed (%s); re-forming the job\n", slot_name(slot).c_str(),
                  static_cast<long long>(step + 1), status.message().c_str());
      std::fflush(stdout);
    }
    Result<int64_t> next = reform(status, admitting ? *joiners : std::vector<int>{},
                                  status.ok() ? 0.0 : seconds_since(step_start));
    if (!next.ok() && ends_job(next.status())) return left_job(next.status());
    NTP_ASSIGN_OR_RETURN(step, std::move(next));
    summary.steps = committed;
  }
  // ---- the last checkpoint's commit is part of the job: a fault there re-forms too ----
  for (;;) {
    const Status saved = c.save_dir.empty() ? finish_pending_save() : save_checkpoint_now();
    if (saved.ok()) break;
    if (!peer_failure(saved) || !c.live_recovery) return saved;
    agreement.report_failure(job->epoch);
    Result<int64_t> next = reform(saved, {}, 0.0);
    if (!next.ok() && ends_job(next.status())) return left_job(next.status());
    NTP_RETURN_IF_ERROR(next.status());
  }
  progress.mark(elastic::Phase::kFinished, committed);
  events.log("finished", {{"step", committed}, {"epoch", job->epoch}});
  watch.disarm();
  if (job->role.world_rank == 0) (void)ctx.store->set(group + "/finished", "1");
  if (!c.dump_dir.empty()) {
    NTP_RETURN_IF_ERROR(dump_logical(
        c.dump_dir + "/weights_rank" + std::to_string(ctx.slot_rank) + ".bin", *job, false));
  }
  summary.tokens_per_second =
      timed_steps > 0
          ? static_cast<double>(timed_steps * global_batch * c.model.n_ctx) / timed_seconds
          : 0.0;
  if (report) {
    report->finish(summary.steps, summary.final_loss, summary.final_eval_loss,
                   summary.tokens_per_second, seconds_since(run_start));
  }
  return summary;
}

}  // namespace

Result<TrainSummary> run_training(TrainConfig c, const WorkerContext& ctx) {
  NTP_RETURN_IF_ERROR(validate_train_config(c));
  const shard::SlotRef slot{ctx.slot_rank / c.tp, ctx.slot_rank % c.tp};
  if (std::binary_search(c.failed.begin(), c.failed.end(), slot)) {
    TrainSummary summary;
    summary.took_part = false;
    return summary;
  }
  NTP_ASSIGN_OR_RETURN(auto train_tokens, load_tokens(c.train_data, "--train-data"));
  NTP_ASSIGN_OR_RETURN(auto val_tokens, load_tokens(c.val_data, "--val-data"));
  NTP_ASSIGN_OR_RETURN(Batcher train_batches,
                       Batcher::create(train_tokens, c.global_batch(), c.model.n_ctx, c.data_seed));
  NTP_ASSIGN_OR_RETURN(Batcher val_batches,
                       Batcher::create(val_tokens, c.eval_samples, c.model.n_ctx, c.data_seed + 1));
  auto run = std::make_unique<LiveRun>(c, ctx, std::move(train_batches), std::move(val_batches));
  NTP_ASSIGN_OR_RETURN(std::optional<TrainSummary> left, run->start());
  if (left) return *left;
  return run->run();
}

}  // namespace ntp::train
