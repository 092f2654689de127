#include "train/job.h"

#include <algorithm>
#include <cmath>
#include <fstream>

#include "checkpoint/checkpoint_dir.h"
#include "comm/exit_notice.h"
#include "comm/gloo_communicator.h"
#include "model/model_factory.h"
#include "shard/balance.h"
#include "shard/fold_sync_strategy.h"
#include "shard/native_sync_strategy.h"
#include "train/train_checkpoint.h"
#include "train/unit_blocks.h"

namespace ntp::train {

std::unique_ptr<shard::SyncStrategy> make_strategy(const TrainConfig& c) {
  if (c.strategy == "native") return std::make_unique<shard::NativeSyncStrategy>(c.tp);
  return std::make_unique<shard::FoldSyncStrategy>();
}

std::string slot_name(shard::SlotRef s) {
  return std::to_string(s.domain) + ":" + std::to_string(s.slot);
}

std::vector<int> slot_ranks(const shard::ClusterLayout& layout) {
  std::vector<int> out;
  for (const shard::SlotRef& s : active_slots(layout)) {
    out.push_back(s.domain * layout.spec.domain_size + s.slot);
  }
  return out;
}

std::vector<std::string> incarnations(int attempt, const elastic::MemberList& list) {
  std::vector<std::string> out;
  for (int restart : list.restarts) out.push_back(comm::incarnation(attempt, restart));
  return out;
}

Result<shard::ClusterLayout> next_layout(const TrainConfig& c, const shard::SyncStrategy& strategy,
                                         const shard::ClusterLayout& previous,
                                         const std::vector<int>& members,
                                         const std::vector<std::vector<double>>* speeds,
                                         const std::vector<std::vector<double>>* unit_loads) {
  shard::ClusterSpec spec = previous.spec;
  if (unit_loads != nullptr) spec.unit_loads = *unit_loads;
  if (speeds != nullptr) {
    spec.speeds = *speeds;
  } else if (slot_ranks(previous) != members) {
    spec.speeds.clear();  // other members: equal shares, until their speeds are measured anew
  }
  spec.failed.clear();
  spec.left.clear();
  for (int r = 0; r < c.world_slots(); ++r) {
    if (!std::binary_search(members.begin(), members.end(), r)) {
      spec.failed.push_back({r / c.tp, r % c.tp});
    }
  }
  // A domain without members left the job (all its devices lost, or its survivors parked below
  // --min-tp): the other replicas take its samples.
  shard::leave_domains_without_slots(spec);
  Result<shard::ClusterLayout> layout = shard::plan_cluster(spec, strategy, &previous);
  if (!layout.ok()) {
    return failed_precondition("the job cannot go on: " + layout.status().message() +
                               "; the last checkpoint stays intact");
  }
  return layout;
}

namespace {

// build_forward_job; with `with_sync`, the world's connect also starts the links of the sync and
// DP groups that build_job forms next, so the formation exchanges its addresses once
// (GlooOptions::planned_subgroups).
Status build_forward_part(Job& job_ref, const TrainConfig& c, const WorkerContext& ctx,
                          shard::ClusterLayout layout, shard::SlotRef slot, int epoch,
                          InitialState state, bool with_sync) {
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
  gloo.planned_subgroups.push_back(role.replica_members());  // tp (and sync: the same ranks)
  if (with_sync) {
    for (const DpSet& set : role.dp_sets) gloo.planned_subgroups.push_back(set.world_ranks);
  }
  NTP_ASSIGN_OR_RETURN(std::unique_ptr<comm::Communicator> world, comm::connect_gloo(gloo));
  job->install(job->world, std::move(world));
  const std::string d = std::to_string(role.replica);
  NTP_ASSIGN_OR_RETURN(std::unique_ptr<comm::Communicator> tp,
                       job->world->subgroup(role.replica_members(), "tp" + d));
  job->install(job->tp, std::move(tp));
  job->tp_group = std::make_unique<model::CommTpGroup>(*job->tp);
  NTP_ASSIGN_OR_RETURN(job->model,
                       model::create_model(c.model, role.shard, c.seed, job->tp_group.get(),
                                           state == InitialState::kDrawn));
  job->model->set_matmul_dtype(c.dtype);
  NTP_RETURN_IF_ERROR(job->model->set_expert_dispatch(c.expert_dispatch));
  return ok_status();
}

}  // namespace

Status build_forward_job(Job& job, const TrainConfig& c, const WorkerContext& ctx,
                         shard::ClusterLayout layout, shard::SlotRef slot, int epoch,
                         InitialState state) {
  return build_forward_part(job, c, ctx, std::move(layout), slot, epoch, state,
                            /*with_sync=*/false);
}

Status build_job(Job& job_ref, const TrainConfig& c, const WorkerContext& ctx,
                 shard::ClusterLayout layout, shard::SlotRef slot, int epoch, InitialState state) {
  Job* job = &job_ref;
  NTP_RETURN_IF_ERROR(build_forward_part(job_ref, c, ctx, std::move(layout), slot, epoch, state,
                                         /*with_sync=*/true));
  const WorkerRole& role = job->role;
  const std::string d = std::to_string(role.replica);
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
  job->paces = plan_replica_paces(job->layout, c.batch_policy, c.power_limit);
  NTP_ASSIGN_OR_RETURN(job->batches,
                       split_global_batch(c.batch_policy, paces_of(job->paces), c.global_batch(),
                                          c.micro_batch, c.batch_grain()));
  return ok_status();
}

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

Result<double> evaluate(const TrainConfig& c, Job& job, const data::Batcher& val) {
  const WorkerRole& role = job.role;
  const int64_t n = shard::balanced_count(c.eval_samples, role.replicas, role.replica_index);
  const int64_t begin = shard::balanced_offset(c.eval_samples, role.replicas, role.replica_index);
  double weighted = 0.0;
  for (int64_t k = 0; k < n; k += c.micro_batch) {
    const int64_t m = std::min(c.micro_batch, n - k);
    NTP_ASSIGN_OR_RETURN(data::Batch batch, val.get(0, begin + k, m));
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

void apply_power(const std::vector<ReplicaPace>& paces, const shard::ClusterLayout& layout,
                 power::PowerControl& control, std::optional<TrainReport>& report) {
  for (const shard::ReplicaLayout& r : layout.replicas) {
    const ReplicaPace& p = paces[static_cast<size_t>(r.domain)];
    if (control.current(r.domain) == p.boost.power_factor) continue;  // unchanged
    if (control.set_domain_power(r.domain, p.boost.power_factor).ok() && report) {
      report->power(r.domain, r.degree(), p.unboosted, p.boost);
    }
  }
}

}  // namespace ntp::train
