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
#include <optional>

#include "checkpoint/checkpoint_dir.h"
#include "comm/gloo_communicator.h"
#include "kernels/cpu/clip.h"
#include "model/comm_tp_group.h"
#include "model/gpt_model.h"
#include "shard/balance.h"
#include "shard/fold_sync_strategy.h"
#include "shard/native_sync_strategy.h"
#include "train/adamw_optimizer.h"
#include "train/batcher.h"
#include "train/sharded_adamw.h"
#include "train/token_file.h"
#include "train/train_checkpoint.h"
#include "train/train_report.h"
#include "train/unit_blocks.h"
#include "train/worker_role.h"

namespace ntp::train {
namespace {

using Clock = std::chrono::steady_clock;

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
};

// Builds the job of `layout` for `slot`: communicators named by `epoch` (a new one after every
// membership change), the model shard, the sync executor and the optimizer.
Result<std::unique_ptr<Job>> build_job(const TrainConfig& c, const WorkerContext& ctx,
                                       shard::ClusterLayout layout, shard::SlotRef slot,
                                       int epoch) {
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
  NTP_ASSIGN_OR_RETURN(job->world, comm::connect_gloo(gloo));
  const std::string d = std::to_string(role.replica);
  NTP_ASSIGN_OR_RETURN(job->tp, job->world->subgroup(role.replica_world_ranks, "tp" + d));
  NTP_ASSIGN_OR_RETURN(job->replica, job->world->subgroup(role.replica_world_ranks, "sync" + d));
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
                       model::GptModel::create(c.model, role.shard, c.seed, job->tp_group.get()));
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
      const std::vector<float> local(grads ? p.grad.span().begin() : p.value.span().begin(),
                                     grads ? p.grad.span().end() : p.value.span().end());
      model::Param view = p;
      view.scatter_to_logical(local, logical[i]);
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

  // ---- the job: layout -> this worker's role -> communicators, model shard, sync, optimizer ----
  auto strategy = make_strategy(c);
  NTP_ASSIGN_OR_RETURN(shard::ClusterLayout layout,
                       shard::plan_cluster(cluster_spec(c), *strategy));
  NTP_ASSIGN_OR_RETURN(std::unique_ptr<Job> job, build_job(c, ctx, std::move(layout), slot, 0));
  const WorkerRole& role = job->role;
  model::GptModel& model = *job->model;
  SyncExecutor& sync = *job->sync;
  const bool leader = role.world_rank == 0;
  std::optional<TrainReport> report;
  if (leader) {
    NTP_ASSIGN_OR_RETURN(report, TrainReport::open(c, job->layout, job->batches, ctx.out));
  }
  if (!c.dump_dir.empty()) std::filesystem::create_directories(c.dump_dir);

  // ---- resume: weights, moments and the step from a checkpoint written at any layout ----
  WorkerState state{role, model.params(), job->adamw ? &*job->adamw : nullptr,
                    job->sharded ? &*job->sharded : nullptr, &sync};
  int64_t first_step = 0;
  std::string resume_dir = c.resume;
  if (resume_dir == "auto") {
    resume_dir = checkpoint::latest_step_dir(c.save_dir).ok() ? c.save_dir : "";
  }
  if (!resume_dir.empty()) {
    Result<checkpoint::CheckpointReader> reader = checkpoint::CheckpointReader::open(resume_dir);
    if (!reader.ok()) {
      return invalid_argument("--resume " + resume_dir + ": " + reader.status().message());
    }
    NTP_ASSIGN_OR_RETURN(first_step, load_checkpoint(*reader, c, state));
    if (report) report->resumed(first_step, reader->step_dir().string());
  }
  CheckpointSaver saver(c.save_dir, c.keep_last,
                        "d" + std::to_string(slot.domain) + "s" + std::to_string(slot.slot));
  const int64_t last_step =
      c.stop_after > 0 ? std::min(c.steps, first_step + c.stop_after) : c.steps;

  const int64_t global_batch = c.global_batch();
  const ReplicaBatch& mine = job->batches[static_cast<size_t>(role.replica)];
  const auto micro_scale = static_cast<float>(c.micro_batch) / static_cast<float>(global_batch);
  double timed_seconds = 0.0;
  int64_t timed_steps = 0;

  summary.steps = first_step;
  for (int64_t step = first_step; step < last_step; ++step) {
    if (ctx.on_step) ctx.on_step(step);
    const Clock::time_point step_start = Clock::now();

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
        backward.on_grads_ready = [&sync](std::span<const int> ready) { sync.grads_ready(ready); };
      }
      NTP_ASSIGN_OR_RETURN(double loss,
                           model.forward_backward(batch.tokens, batch.targets, c.micro_batch,
                                                  c.model.n_ctx, backward));
      replica_loss += loss / static_cast<double>(mine.micro_batches);
    }
    const double fwd_bwd_s = seconds_since(step_start);

    // ---- wait for the sync still in flight ----
    const Clock::time_point wait_start = Clock::now();
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

    // ---- clip + optimizer ----
    const Clock::time_point opt_start = Clock::now();
    const float clip =
        c.grad_clip > 0.0 ? kernels::cpu::clip_coefficient(grad_norm, c.grad_clip) : 1.0f;
    const float lr = warmup_cosine_lr(step, c.warmup, c.steps, c.lr, c.min_lr);
    if (job->sharded) {
      job->sharded->step(sync.owned_chunks(), model.params(), lr, clip);
      NTP_RETURN_IF_ERROR(sync.publish_values(job->sharded->master()));
    } else {
      job->adamw->step(model.params(), lr, clip);
    }
    const double optimizer_s = seconds_since(opt_start);

    // ---- commit: every rank applied step `step` ----
    summary.steps = step + 1;
    summary.final_loss = loss;

    // ---- metrics: per-rank figures to the leader ----
    std::vector<double> times(kRankFigures * static_cast<size_t>(role.world_size), 0.0);
    const SyncStats& stats = sync.stats();
    const RankFigures mine_figures{fwd_bwd_s, sync_wait_s, optimizer_s, stats.overlap_fraction(),
                                   static_cast<double>(stats.fold_bytes_sent + stats.dp_bytes)};
    std::copy(
        mine_figures.begin(), mine_figures.end(),
        times.begin() + static_cast<long>(kRankFigures * static_cast<size_t>(role.world_rank)));
    NTP_RETURN_IF_ERROR(job->world->allreduce(comm::view(times)));
    const double step_s = seconds_since(step_start);
    if (step > 0) {  // the first step pays for first touches of every buffer
      timed_seconds += step_s;
      ++timed_steps;
    }
    if (report) {
      report->step({step, loss, lr, grad_norm, clip, step_s,
                    static_cast<double>(global_batch * c.model.n_ctx) / step_s},
                   times);
    }

    // ---- checkpoint: commit the previous save (its write had a step to run), start this one ----
    const bool last = step + 1 == last_step;
    if (saver.pending()) {
      const int64_t saved = saver.pending_step();
      NTP_ASSIGN_OR_RETURN(std::string dir, saver.finish(*job->world));
      if (report) report->checkpoint(saved, dir, saver.last_blocked_s());
    }
    if (!c.save_dir.empty() && ((c.save_every > 0 && (step + 1) % c.save_every == 0) || last)) {
      const std::vector<checkpoint::PieceView> pieces = checkpoint_pieces(state);
      NTP_RETURN_IF_ERROR(
          saver.start(checkpoint_meta(c, step + 1, state.optimizer_steps()), pieces));
    }

    // ---- eval ----
    if ((c.eval_every > 0 && (step + 1) % c.eval_every == 0) || last) {
      NTP_ASSIGN_OR_RETURN(double eval_loss, evaluate(c, *job, val_batches));
      summary.final_eval_loss = eval_loss;
      if (report) report->eval(step, eval_loss);
    }
  }

  if (saver.pending()) {
    const int64_t saved = saver.pending_step();
    NTP_ASSIGN_OR_RETURN(std::string dir, saver.finish(*job->world));
    if (report) report->checkpoint(saved, dir, saver.last_blocked_s());
  }
  if (!c.dump_dir.empty()) {
    NTP_RETURN_IF_ERROR(dump_logical(
        c.dump_dir + "/weights_rank" + std::to_string(ctx.slot_rank) + ".bin", *job, false));
  }
  summary.tokens_per_second =
      timed_steps > 0
          ? static_cast<double>(timed_steps * global_batch * c.model.n_ctx) / timed_seconds
          : 0.0;
  if (report)
    report->finish(summary.steps, summary.final_loss, summary.final_eval_loss,
                   summary.tokens_per_second);
  return summary;
}

}  // namespace ntp::train
