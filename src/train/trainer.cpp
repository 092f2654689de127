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

#include <nlohmann/json.hpp>
#include <optional>
#include <thread>

#include "checkpoint/checkpoint_dir.h"
#include "comm/exit_notice.h"
#include "comm/gloo_communicator.h"
#include "comm/survivors.h"
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
#include "train/failure_watch.h"
#include "train/fault_point.h"
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
// The failure watch polls the store every 20 ms (train/failure_watch.h).
constexpr std::chrono::milliseconds kHeartbeatPeriod{100};
constexpr std::chrono::milliseconds kWatchPoll{20};

double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

std::unique_ptr<shard::SyncStrategy> make_strategy(const TrainConfig& c) {
  if (c.strategy == "native") return std::make_unique<shard::NativeSyncStrategy>(c.tp);
  return std::make_unique<shard::FoldSyncStrategy>();
}

// Everything one cluster layout implies for this worker. Members are destroyed in reverse order:
// the executor (which uses the communicators and the model's tensors) goes first.
struct Job {
  shard::ClusterLayout layout;
  WorkerRole role;
  std::unique_ptr<comm::Communicator> world, tp, replica;
  std::vector<std::unique_ptr<comm::Communicator>> dp;
  std::unique_ptr<model::CommTpGroup> tp_group;
  std::optional<model::GptModel> model;
  std::unique_ptr<SyncExecutor> sync;
  std::optional<AdamWOptimizer> adamw;
  std::optional<ShardedAdamW> sharded;
  std::vector<ReplicaBatch> batches;  // [replica]

  // Breaks every communicator (peers blocked on this worker fail at once).
  void abort_all(const std::string& reason) {
    for (auto& d : dp) d->abort(reason);
    if (replica) replica->abort(reason);
    if (tp) tp->abort(reason);
    if (world) world->abort(reason);
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
  }
  void restore(Job& job) const {
    std::vector<model::Param>& params = job.model->params();
    for (size_t i = 0; i < params.size(); ++i) {
      std::copy(values_[i].begin(), values_[i].end(), params[i].value.span().begin());
      job.adamw->exp_avg(i) = m_[i];
      job.adamw->exp_avg_sq(i) = v_[i];
    }
    job.adamw->set_steps_taken(steps_);
  }

 private:
  std::vector<std::vector<float>> values_, m_, v_;
  int64_t steps_ = 0;
};

// Which process each slot runs now, as the launcher names it in its exit notices: the attempt
// and each slot's restart count (repairs raise it; members learn a joiner's at its admission).
struct Incarnations {
  int attempt = 0;
  std::vector<int> restarts;  // [global rank]
  std::string of(int rank) const {
    return comm::incarnation(attempt, restarts[static_cast<size_t>(rank)]);
  }
};

// The agreement waits for a candidate until it announces, its heartbeat has been still for a
// second, or it is known gone: the launcher reported its process gone, or a failure watch found
// its heartbeat still and it has not moved since (no further wait for a killed or hung worker).
comm::AgreementOptions agreement_options(const TrainConfig& c, comm::Store& store,
                                         const std::string& group, const Incarnations& alive) {
  comm::AgreementOptions a;
  a.window = std::chrono::milliseconds(2 * c.comm_timeout_ms + 2000);
  a.stale_after = std::chrono::milliseconds(c.hang_detect_ms);
  a.known_dead = [&store, group, &alive](int id) {
    return comm::has_exited(store, id, alive.of(id)) ||
           FailureWatch::still_silent(store, group, id);
  };
  return a;
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

// The smallest committed step of the new world's members (every one has applied it).
Result<int64_t> agreed_committed_step(comm::Communicator& world, int64_t committed) {
  const std::vector<int64_t> mine{committed};
  std::vector<int64_t> all(static_cast<size_t>(world.size()));
  NTP_RETURN_IF_ERROR(
      world.allgather(comm::const_view(mine), comm::view(all), std::vector<size_t>(all.size(), 1)));
  return *std::min_element(all.begin(), all.end());
}

// Repairs: a replacement worker (NTP_RESTART_COUNT > 0) writes "<group>/join/<rank>" = its
// restart count and waits; world rank 0 of the job looks for such keys at every step boundary and
// tells everyone (a broadcast), then writes "<group>/admit/<rank>/<restart>" with what the joiner
// needs: the epoch, the candidates, the step, and the slot order of the current layout.
std::string join_key(const std::string& group, int rank) {
  return group + "/join/" + std::to_string(rank);
}

Result<std::vector<int>> pending_joiners(const WorkerContext& ctx, const std::string& group,
                                         Job& job, Incarnations& alive) {
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
      try {
        flags[static_cast<size_t>(r)] = 1 + std::stoi(*asked);  // its restart count, + 1
      } catch (const std::exception&) {
      }
    }
  }
  NTP_RETURN_IF_ERROR(job.world->broadcast(comm::view(flags), 0));
  std::vector<int> out;
  for (int r = 0; r < slots; ++r) {
    if (flags[static_cast<size_t>(r)] == 0) continue;
    out.push_back(r);
    alive.restarts[static_cast<size_t>(r)] = flags[static_cast<size_t>(r)] - 1;
  }
  return out;
}

Status admit(const WorkerContext& ctx, const std::string& group, const std::vector<int>& joiners,
             int epoch, const std::vector<int>& candidates, int64_t step,
             const shard::ClusterLayout& layout, const Incarnations& alive) {
  nlohmann::json slots = nlohmann::json::array();
  for (const shard::ReplicaLayout& r : layout.replicas) slots.push_back(r.slots);
  const std::string text =
      nlohmann::json{{"epoch", epoch}, {"candidates", candidates}, {"members", slot_ranks(layout)},
                     {"step", step},   {"slots", slots},           {"restarts", alive.restarts}}
          .dump();
  for (int r : joiners) {
    NTP_ASSIGN_OR_RETURN(std::string restart, ctx.store->get(join_key(group, r)));
    NTP_RETURN_IF_ERROR(
        ctx.store->set(group + "/admit/" + std::to_string(r) + "/" + restart, text));
    NTP_RETURN_IF_ERROR(ctx.store->set(join_key(group, r) + "/taken", restart));
  }
  return ok_status();
}

struct Admission {
  int epoch = 0;
  std::vector<int> candidates, members;  // global ranks: after / before the repair
  int64_t step = 0;
  std::vector<std::vector<int>> slots;  // [domain]: the current layout's slot order
  std::vector<int> restarts;            // [global rank]: every slot's restart count
};

Result<Admission> wait_for_admission(const WorkerContext& ctx, const std::string& group) {
  const std::string restart = std::to_string(ctx.restart_count);
  NTP_RETURN_IF_ERROR(ctx.store->set(join_key(group, ctx.slot_rank), restart));
  const std::string key = group + "/admit/" + std::to_string(ctx.slot_rank) + "/" + restart;
  const Clock::time_point start = Clock::now();
  while (true) {
    Result<std::string> text = ctx.store->get(key);
    if (text.ok()) {
      const nlohmann::json j = nlohmann::json::parse(*text);
      return Admission{j["epoch"].get<int>(),
                       j["candidates"].get<std::vector<int>>(),
                       j["members"].get<std::vector<int>>(),
                       j["step"].get<int64_t>(),
                       j["slots"].get<std::vector<std::vector<int>>>(),
                       j["restarts"].get<std::vector<int>>()};
    }
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

// Builds the job of `layout` for `slot`: communicators named by `epoch` (a new one after every
// membership change), the model shard, the sync executor and the optimizer.
Result<std::unique_ptr<Job>> build_job(const TrainConfig& c, const WorkerContext& ctx,
                                       shard::ClusterLayout layout, shard::SlotRef slot, int epoch,
                                       InitialState state) {
  auto job = std::make_unique<Job>();
  job->layout = std::move(layout);
  NTP_ASSIGN_OR_RETURN(job->role, worker_role(job->layout, slot));
  const WorkerRole& role = job->role;

  comm::GlooOptions gloo;
  gloo.store = ctx.store;
  gloo.rank = role.world_rank;
  gloo.size = role.world_size;
  gloo.prefix = "train/a" + std::to_string(ctx.attempt) + "/e" + std::to_string(epoch);
  gloo.timeout = std::chrono::milliseconds(c.comm_timeout_ms);
  if (!ctx.local_addr.empty()) gloo.hostname = ctx.local_addr;
  NTP_ASSIGN_OR_RETURN(job->world, comm::connect_gloo(gloo));
  const std::string d = std::to_string(role.replica);
  NTP_ASSIGN_OR_RETURN(job->tp, job->world->subgroup(role.replica_members(), "tp" + d));
  NTP_ASSIGN_OR_RETURN(job->replica, job->world->subgroup(role.replica_members(), "sync" + d));
  SyncComms comms;
  comms.replica = job->replica.get();
  for (const DpSet& set : role.dp_sets) {
    NTP_ASSIGN_OR_RETURN(std::unique_ptr<comm::Communicator> dp,
                         job->world->subgroup(set.world_ranks, set.name));
    comms.dp.push_back(dp.get());
    job->dp.push_back(std::move(dp));
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
  return job;
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

}  // namespace

Result<TrainSummary> run_training(TrainConfig c, const WorkerContext& ctx) {
  NTP_RETURN_IF_ERROR(validate_train_config(c));
  const shard::SlotRef slot{ctx.slot_rank / c.tp, ctx.slot_rank % c.tp};
  TrainSummary summary;
  if (std::binary_search(c.failed.begin(), c.failed.end(), slot)) {
    summary.took_part = false;
    return summary;
  }
  NTP_ASSIGN_OR_RETURN(auto train_tokens, load_tokens(c.train_data, "--train-data"));
  NTP_ASSIGN_OR_RETURN(auto val_tokens, load_tokens(c.val_data, "--val-data"));
  NTP_ASSIGN_OR_RETURN(Batcher train_batches,
                       Batcher::create(train_tokens, c.global_batch(), c.model.n_ctx, c.data_seed));
  NTP_ASSIGN_OR_RETURN(Batcher val_batches,
                       Batcher::create(val_tokens, c.eval_samples, c.model.n_ctx, c.data_seed + 1));

  const Clock::time_point run_start = Clock::now();
  // ---- the job: layout -> this worker's role -> communicators, model shard, sync, optimizer ----
  auto strategy = make_strategy(c);
  const std::string group = "train/a" + std::to_string(ctx.attempt);
  comm::Heartbeat heartbeat(ctx.store, group, ctx.slot_rank, kHeartbeatPeriod);
  EventLog events(c.out_dir, ctx.slot_rank);  // this worker's detections and decisions
  std::unique_ptr<Job> job;  // declared before the watch, which must stop before the job goes
  FailureWatch watch(ctx.store, kWatchPoll, std::chrono::milliseconds(c.hang_detect_ms));
  Incarnations alive{ctx.attempt, std::vector<int>(static_cast<size_t>(c.world_slots()), 0)};
  alive.restarts[static_cast<size_t>(ctx.slot_rank)] = ctx.restart_count;
  int epoch = 0;
  // From here on, a fault anywhere in the job aborts this worker's pending operations at once.
  auto watch_job = [&](Job& j) {
    watch.arm({group, epoch, ctx.slot_rank, slot_ranks(j.layout),
               [&alive](int id) { return alive.of(id); },
               [&j, &events](const std::string& reason) {
                 events.log("step_failed", {{"by", "watch"}, {"reason", reason}});
                 j.abort_all(reason);
               }});
  };
  int64_t first_step = 0;
  if (ctx.restart_count > 0) {
    // ---- a repair: wait to be admitted at a step boundary, then take this slot's units ----
    Result<Admission> admission = wait_for_admission(ctx, group);
    if (!admission.ok()) {
      if (admission.status().code() != StatusCode::kAborted) return admission.status();
      summary.took_part = false;
      summary.left = admission.status().message();
      return summary;
    }
    epoch = admission->epoch;
    alive.restarts = admission->restarts;
    NTP_ASSIGN_OR_RETURN(
        comm::Membership members,
        comm::agree_on_survivors(*ctx.store, group, epoch, ctx.slot_rank, admission->candidates,
                                 agreement_options(c, *ctx.store, group, alive)));
    events.log("agreed", {{"epoch", epoch}, {"members", members.members}});
    shard::ClusterSpec before = cluster_spec(c);
    before.failed.clear();
    for (int r = 0; r < c.world_slots(); ++r) {
      if (!std::binary_search(admission->members.begin(), admission->members.end(), r)) {
        before.failed.push_back({r / c.tp, r % c.tp});
      }
    }
    NTP_ASSIGN_OR_RETURN(shard::ClusterLayout old, shard::plan_cluster(before, *strategy));
    for (size_t d = 0; d < old.replicas.size(); ++d) old.replicas[d].slots = admission->slots[d];
    NTP_ASSIGN_OR_RETURN(shard::ClusterLayout layout,
                         next_layout(c, *strategy, old, members.members));
    NTP_ASSIGN_OR_RETURN(
        job, build_job(c, ctx, std::move(layout), slot, epoch, InitialState::kFilledByCaller));
    watch_job(*job);
    NTP_ASSIGN_OR_RETURN(first_step, agreed_committed_step(*job->world, admission->step));
    const Clock::time_point t_reshard = Clock::now();
    int64_t received = 0;
    if (job->sharded) {  // ZeRO-1: the members saved the current step before admitting us
      NTP_ASSIGN_OR_RETURN(std::optional<int64_t> loaded, load_latest_checkpoint(c, *job));
      if (!loaded) return failed_precondition("no checkpoint to join a ZeRO-1 job from");
      first_step = *loaded;
    } else {
      NTP_ASSIGN_OR_RETURN(
          ReshardStats moved,
          execute_state_reshard(old, job->layout, slot, nullptr,
                                {&job->model->params(), &*job->adamw}, *job->world));
      job->adamw->set_steps_taken(first_step);
      received = moved.bytes_received;
    }
    NTP_RETURN_IF_ERROR(reshard_totals(*job->world, received, seconds_since(t_reshard)).status());
    events.log("joined", {{"step", first_step}, {"epoch", epoch}});
    std::printf("slot %s: repaired, joined at step %lld (epoch %d)\n", slot_name(slot).c_str(),
                static_cast<long long>(first_step + 1), epoch);
    std::fflush(stdout);
  } else {
    NTP_ASSIGN_OR_RETURN(shard::ClusterLayout layout,
                         shard::plan_cluster(cluster_spec(c), *strategy));
    NTP_ASSIGN_OR_RETURN(job, build_job(c, ctx, std::move(layout), slot, 0, InitialState::kDrawn));
    watch_job(*job);
  }
  std::optional<TrainReport> report;
  auto open_report = [&](bool append) -> Status {
    if (report || job->role.world_rank != 0) return ok_status();
    NTP_ASSIGN_OR_RETURN(report, TrainReport::open(c, job->layout, job->batches, ctx.out, append));
    return ok_status();
  };
  NTP_RETURN_IF_ERROR(open_report(!c.resume.empty() || ctx.restart_count > 0));
  power::RecordingPowerControl power_control;  // CPU: records what the planner asks for
  const bool boost = c.batch_policy == BatchPolicy::kKeep;
  if (boost && report) plan_power(job->layout, power_control, report);
  if (!c.dump_dir.empty()) std::filesystem::create_directories(c.dump_dir);

  // ---- resume: weights, moments and the step from a checkpoint written at any layout ----
  auto worker_state = [&job]() {
    return WorkerState{job->role, job->model->params(), job->adamw ? &*job->adamw : nullptr,
                       job->sharded ? &*job->sharded : nullptr, job->sync.get()};
  };
  std::string resume_dir = ctx.restart_count > 0 ? "" : c.resume;
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
    if (report) report->resumed(first_step, reader->step_dir().string());
  }
  CheckpointSaver saver(c.save_dir, c.keep_last,
                        "d" + std::to_string(slot.domain) + "s" + std::to_string(slot.slot));
  const int64_t last_step =
      c.stop_after > 0 ? std::min(c.steps, first_step + c.stop_after) : c.steps;

  const int64_t global_batch = c.global_batch();
  const auto micro_scale = static_cast<float>(c.micro_batch) / static_cast<float>(global_batch);
  double timed_seconds = 0.0;
  int64_t timed_steps = 0;
  int64_t committed = first_step;  // steps whose update this worker has applied
  UndoLog undo;                    // the state before the last update (live recovery)

  // Checkpoints: the save started at the end of the previous step is committed at the end of
  // this one (its write had a step to run); `saved_step` is the last committed save's step.
  int64_t saved_step = -1;
  auto finish_pending_save = [&]() -> Status {
    if (!saver.pending()) return ok_status();
    const int64_t step = saver.pending_step();
    NTP_ASSIGN_OR_RETURN(std::string dir, saver.finish(*job->world));
    saved_step = step;
    if (report) report->checkpoint(step, dir, saver.last_blocked_s());
    return ok_status();
  };
  // A save of the committed state, written and committed before returning.
  auto save_checkpoint_now = [&]() -> Status {
    NTP_RETURN_IF_ERROR(finish_pending_save());
    if (saved_step == committed) return ok_status();
    WorkerState state = worker_state();
    const std::vector<checkpoint::PieceView> pieces = checkpoint_pieces(state);
    NTP_RETURN_IF_ERROR(
        saver.start(checkpoint_meta(c, committed, state.optimizer_steps()), pieces));
    return finish_pending_save();
  };
  // Live recovery cannot go on: every survivor stops, one says why (kFailedPrecondition).
  bool stop_speaks = false;
  auto stop_job = [&](const std::string& why, bool speaks) -> Status {
    stop_speaks = speaks;
    return failed_precondition(why);
  };

  // One training step on the current job. Any error of a peer surfaces as kUnavailable.
  auto train_step = [&](int64_t step) -> Status {
    const WorkerRole& role = job->role;
    model::GptModel& model = *job->model;
    SyncExecutor& sync = *job->sync;
    const ReplicaBatch& mine = job->batches[static_cast<size_t>(role.replica)];
    const Clock::time_point step_start = Clock::now();
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
      replica_loss += loss / static_cast<double>(mine.micro_batches);
    }
    const double fwd_bwd_s = seconds_since(step_start);

    // ---- wait for the sync still in flight ----
    const Clock::time_point wait_start = Clock::now();
    fault_point("wait");
    NTP_RETURN_IF_ERROR(sync.wait());
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
    const float clip =
        c.grad_clip > 0.0 ? kernels::cpu::clip_coefficient(grad_norm, c.grad_clip) : 1.0f;
    const float lr = warmup_cosine_lr(step, c.warmup, c.steps, c.lr, c.min_lr);
    if (job->sharded) {
      job->sharded->step(sync.owned_chunks(), model.params(), lr, clip);
      NTP_RETURN_IF_ERROR(sync.publish_values(job->sharded->master()));
    } else {
      undo.save(*job);
      job->adamw->step(model.params(), lr, clip);
    }
    const double optimizer_s = seconds_since(opt_start);

    // ---- commit: this worker applied step `step` ----
    fault_point("commit");
    committed = step + 1;
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
    const bool last = step + 1 == last_step;
    NTP_RETURN_IF_ERROR(finish_pending_save());
    if (!c.save_dir.empty() && ((c.save_every > 0 && (step + 1) % c.save_every == 0) || last)) {
      WorkerState state = worker_state();
      const std::vector<checkpoint::PieceView> pieces = checkpoint_pieces(state);
      NTP_RETURN_IF_ERROR(
          saver.start(checkpoint_meta(c, step + 1, state.optimizer_steps()), pieces));
      fault_point("checkpoint");
    }

    // ---- eval ----
    if ((c.eval_every > 0 && (step + 1) % c.eval_every == 0) || last) {
      NTP_ASSIGN_OR_RETURN(double eval_loss, evaluate(c, *job, val_batches));
      summary.final_eval_loss = eval_loss;
      if (report) report->eval(step, eval_loss);
    }
    return ok_status();
  };

  // Re-forms the job after a membership change (a failure, or repairs to admit): agree on the
  // members, roll back a step that not every survivor applied, plan the new layout, rebuild the
  // communicators and move the state (train/state_reshard.h). Returns the step to continue at.
  auto reconfigure = [&](const Status& cause, const std::vector<int>& joiners,
                         double detect_s) -> Result<int64_t> {
    const Clock::time_point t0 = Clock::now();
    RecoveryEvent event;
    event.detect_s = detect_s;
    event.cause = cause.ok() ? "repair" : cause.message();
    // ZeRO-1 moments exist once in the job: a lost rank's have no live copy, and the reshard
    // moves replicated state only. Such a job continues from its latest checkpoint; at a repair,
    // when every member is alive, it first saves one of the current step, so nothing is lost.
    const bool from_checkpoint = job->sharded.has_value();
    if (from_checkpoint && cause.ok() && !c.save_dir.empty()) {
      NTP_RETURN_IF_ERROR(save_checkpoint_now());
    }
    watch.disarm();
    job->abort_all(cause.ok() ? "admitting repaired slots" : cause.message());
    saver.abandon();  // its records cannot all be gathered any more
    std::vector<int> candidates = slot_ranks(job->layout);
    candidates.insert(candidates.end(), joiners.begin(), joiners.end());
    std::sort(candidates.begin(), candidates.end());
    ++epoch;
    if (!joiners.empty() && job->role.world_rank == 0) {
      NTP_RETURN_IF_ERROR(
          admit(ctx, group, joiners, epoch, candidates, committed, job->layout, alive));
    }
    Result<comm::Membership> members =
        comm::agree_on_survivors(*ctx.store, group, epoch, ctx.slot_rank, candidates,
                                 agreement_options(c, *ctx.store, group, alive));
    if (!members.ok()) {
      if (members.status().code() == StatusCode::kAborted) {
        return Status(StatusCode::kAborted, "slot " + slot_name(slot) +
                                                " was declared dead (fenced at epoch " +
                                                std::to_string(epoch) + "); it leaves the job");
      }
      return members.status();
    }
    event.agree_s = seconds_since(t0);
    events.log("agreed", {{"epoch", epoch}, {"members", members->members}});
    Result<shard::ClusterLayout> layout = next_layout(c, *strategy, job->layout, members->members);
    if (!layout.ok() && layout.status().code() == StatusCode::kFailedPrecondition) {
      return stop_job(layout.status().message(), members->new_rank == 0);
    }
    NTP_RETURN_IF_ERROR(layout.status());
    const Clock::time_point t_build = Clock::now();
    NTP_ASSIGN_OR_RETURN(
        std::unique_ptr<Job> next,
        build_job(c, ctx, std::move(*layout), slot, epoch, InitialState::kFilledByCaller));
    watch_job(*next);
    // Declared after `next`, so an error return disarms the watch before `next` is destroyed.
    struct DisarmOnError {
      FailureWatch& watch;
      bool done = false;
      ~DisarmOnError() {
        if (!done) watch.disarm();
      }
    } disarm_on_error{watch};
    event.rebuild_s = seconds_since(t_build);
    // The step every member has applied: one that only some applied is taken back.
    NTP_ASSIGN_OR_RETURN(int64_t agreed, agreed_committed_step(*next->world, committed));
    event.rolled_back = committed > agreed;
    const Clock::time_point t_reshard = Clock::now();
    int64_t moved_bytes = 0;
    if (from_checkpoint) {
      NTP_ASSIGN_OR_RETURN(std::optional<int64_t> loaded, load_latest_checkpoint(c, *next));
      if (!loaded) {
        return stop_job(
            "the ZeRO-1 optimizer state of a lost rank has no live copy and --save-dir holds no "
            "checkpoint to fall back to; use --optimizer replicated, or --save-dir with "
            "--save-every, for live recovery; the job stops",
            next->role.world_rank == 0);
      }
      event.state_from = "checkpoint";
      event.checkpoint_step = *loaded;
      event.rolled_back = committed > *loaded;
      agreed = *loaded;
    } else {
      if (event.rolled_back) undo.restore(*job);
      HeldState from{&job->model->params(), &*job->adamw};
      NTP_ASSIGN_OR_RETURN(
          ReshardStats moved,
          execute_state_reshard(job->layout, next->layout, slot, &from,
                                {&next->model->params(), &*next->adamw}, *next->world));
      next->adamw->set_steps_taken(agreed);
      moved_bytes = moved.bytes_received;
    }
    event.reshard_s = seconds_since(t_reshard);
    NTP_ASSIGN_OR_RETURN(ReshardTotals totals,
                         reshard_totals(*next->world, moved_bytes, event.reshard_s));
    event.reshard_bytes = totals.bytes;
    event.reshard_busiest_rank_bytes = totals.busiest_rank_bytes;
    event.reshard_s = totals.slowest_s;
    event.total_s = seconds_since(t0);
    event.step = agreed;
    event.steps_redone = committed - agreed;
    event.epoch = epoch;
    event.old_degrees = job->role.replica_degrees;
    event.degrees = next->role.replica_degrees;
    disarm_on_error.done = true;  // the watch now guards the new job, which lives on in `job`
    job = std::move(next);
    committed = agreed;
    if (job->role.world_rank != 0) report.reset();  // one leader writes the metrics
    NTP_RETURN_IF_ERROR(open_report(true));
    if (report) report->recovery(event, job->layout, job->batches);
    if (boost && report) plan_power(job->layout, power_control, report);
    return agreed;
  };

  // ---- the loop: a failed step is redone on the re-formed job ----
  auto peer_failure = [](const Status& s) {
    return s.code() == StatusCode::kUnavailable || s.code() == StatusCode::kInternal;
  };
  summary.steps = first_step;
  for (int64_t step = first_step; step < last_step;) {
    if (ctx.on_step) ctx.on_step(step);
    Result<std::vector<int>> joiners = pending_joiners(ctx, group, *job, alive);
    Status status = joiners.status();
    const bool admitting = status.ok() && !joiners->empty();
    const Clock::time_point step_start = Clock::now();
    if (status.ok() && !admitting) status = train_step(step);
    if (status.ok() && !admitting) {
      ++step;
      continue;
    }
    if (!status.ok() && (!peer_failure(status) || !c.live_recovery)) return status;
    // ---- re-form: after a failure, or to admit repaired slots; a fault during a re-formation
    //      starts another one (bounded) ----
    Result<int64_t> next = internal_error("the job was not re-formed");
    for (int attempt = 0; attempt < 4; ++attempt) {
      if (!status.ok()) {
        events.log("step_failed", {{"step", step}, {"epoch", epoch}, {"error", status.message()}});
        watch.report_failure(group, epoch);  // the members whose operations do not touch ours
        std::printf("slot %s: %s %lld failed (%s); re-forming the job\n", slot_name(slot).c_str(),
                    attempt == 0 ? "step" : "re-formation before step",
                    static_cast<long long>(step + 1), status.message().c_str());
        std::fflush(stdout);
      }
      next = reconfigure(status, attempt == 0 && admitting ? *joiners : std::vector<int>{},
                         attempt == 0 && !status.ok() ? seconds_since(step_start) : 0.0);
      if (next.ok() || !peer_failure(next.status())) break;
      status = next.status();
    }
    if (!next.ok() && next.status().code() == StatusCode::kAborted) {
      summary.took_part = false;  // declared dead while it was away: it leaves, writing nothing
      summary.fenced = true;
      summary.left = next.status().message();
      events.log("fenced", {{"reason", summary.left}});
      return summary;
    }
    if (!next.ok() && next.status().code() == StatusCode::kFailedPrecondition) {
      summary.stopped = next.status().message();
      summary.speaks = stop_speaks;
      events.log("stopped", {{"reason", summary.stopped}});
      return summary;
    }
    NTP_ASSIGN_OR_RETURN(step, std::move(next));
  }
  NTP_RETURN_IF_ERROR(finish_pending_save());
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

}  // namespace ntp::train
