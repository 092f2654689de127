// One training step of a LiveRun: data -> forward/backward with overlapped sync -> wait -> loss and
// norm -> clip -> optimizer -> commit -> metrics -> checkpoint -> eval.
#include <algorithm>
#include <array>
#include <cmath>
#include <thread>

#include "kernels/cpu/clip.h"
#include "train/fault_point.h"
#include "train/live_run.h"

namespace ntp::train {

// One training step on the current job. Any error of a peer surfaces as kUnavailable.
Status LiveRun::train_step(int64_t step) {
  const Clock::time_point step_start = Clock::now();
  const elastic::Phase phase =
      step == first_step ? elastic::Phase::kFirstStep : elastic::Phase::kStep;
  progress.mark(phase, step);
  // Watchers give a worker still setting up the setup allowance (elastic/progress.h): its first
  // step is announced at once, so that a worker stopped before its next beat is judged as one
  // that trains.
  if (step == first_step) {
    if (heartbeat) heartbeat->beat_now();
    if (plane) plane->beat_now();
  }
  set_fault_step(step);
  fault_point("forward");
  StepTimes times;
  NTP_ASSIGN_OR_RETURN(const ForwardBackward passes, forward_backward(step, phase));
  const double replica_loss = passes.loss;
  times.fwd_bwd_s = seconds_since(step_start);
  times.compute_s = passes.compute_s;
  times.routed_load_peak = passes.routed_load_peak;

  // ---- wait for the sync still in flight ----
  const Clock::time_point wait_start = Clock::now();
  fault_point("wait");
  NTP_RETURN_IF_ERROR(job->sync->wait());
  progress.mark(phase, step);
  times.sync_wait_s = seconds_since(wait_start);
  if (step == 0 && !c.dump_dir.empty()) {
    NTP_RETURN_IF_ERROR(dump_logical(
        c.dump_dir + "/grads_rank" + std::to_string(ctx.slot_rank) + ".bin", *job, true));
  }
  NTP_ASSIGN_OR_RETURN(const StepTotals totals, step_totals(replica_loss));
  // Every member of this epoch has entered this step, so every one finished the re-formation
  // that made it: the state it started from is needed no more.
  base.reset();
  progress.mark(phase, step);

  const Clock::time_point opt_start = Clock::now();
  NTP_ASSIGN_OR_RETURN(const Update update, apply_update(step, totals.grad_norm));
  times.optimizer_s = seconds_since(opt_start);

  // ---- commit: this worker applied step `step` ----
  fault_point("commit");
  set_committed(step + 1);
  state_ahead = false;
  events.log("applied", {{"step", step}, {"epoch", job->epoch}});
  progress.mark(phase, step);
  summary.steps = committed;
  summary.final_loss = totals.loss;

  NTP_RETURN_IF_ERROR(report_step(step, totals, update, times, step_start));
  return checkpoint_and_eval(step, phase);
}

// Forward + backward over this replica's micro-batches; the sync of each bucket starts as soon as
// the last micro-batch's backward has finished it.
Result<LiveRun::ForwardBackward> LiveRun::forward_backward(int64_t step, elastic::Phase phase) {
  model::Model& model = *job->model;
  SyncExecutor& sync = *job->sync;
  const ReplicaBatch& mine = job->batches[static_cast<size_t>(job->role.replica)];
  model.zero_grad();
  for (double& tokens : expert_tokens) tokens *= kExpertLoadDecay;
  ForwardBackward out;
  for (int64_t k = 0; k < mine.micro_batches; ++k) {
    const int64_t size = mine.micro_size(k, c.micro_batch);
    NTP_ASSIGN_OR_RETURN(data::Batch batch,
                         train_batches.get(step, mine.begin + k * c.micro_batch, size));
    model::BackwardOptions backward;
    // The micro-batch's mean loss weighs size / global_batch in the step's sample-weighted mean.
    backward.loss_scale = static_cast<float>(size) / static_cast<float>(global_batch);
    if (k + 1 == mine.micro_batches) {
      backward.on_grads_ready = [&sync](std::span<const int> ready) {
        fault_point("backward");
        sync.grads_ready(ready);
      };
    }
    const double computed_before = progress.computed_cpu_seconds();
    NTP_ASSIGN_OR_RETURN(double loss, model.forward_backward(batch.tokens, batch.targets, size,
                                                             c.model.n_ctx, backward));
    const double computed = progress.computed_cpu_seconds() - computed_before;
    out.compute_s += computed + throttle(step, computed, size);
    out.routed_load_peak = std::max(out.routed_load_peak, model.routed_load_peak());
    const std::vector<double> routed = model.routed_tokens_per_expert();
    expert_tokens.resize(routed.size(), 0.0);
    for (size_t e = 0; e < routed.size(); ++e) expert_tokens[e] += routed[e];
    progress.mark(phase, step);
    // (samples / size is the micro-batch count exactly when every micro-batch is full.)
    out.loss += loss / (static_cast<double>(mine.samples) / static_cast<double>(size));
  }
  return out;
}

// A throttled worker (WorkerContext::compute_factor) takes 1/factor as long for `compute_s` of
// compute: it sleeps the difference (not a wait on its peers: its own, slower compute). With an
// emulated device (--emulate-device-gflops) the micro-batch of `samples` also takes the device's
// time for it, at the worker's factor.
double LiveRun::throttle(int64_t step, double compute_s, int64_t samples) const {
  const double factor = ctx.compute_factor ? ctx.compute_factor(step) : 1.0;
  double sleep_s = factor < 1.0 ? std::max(0.0, compute_s) * (1.0 / factor - 1.0) : 0.0;
  if (c.emulate_device_gflops > 0.0) {
    const double flops = 6.0 * held_params(job->layout, job->role.slot) *
                         static_cast<double>(samples * c.model.n_ctx);
    sleep_s += flops / (c.emulate_device_gflops * 1e9) / factor;
  }
  if (sleep_s > 0.0) std::this_thread::sleep_for(std::chrono::duration<double>(sleep_s));
  return sleep_s;
}

// The global loss and gradient norm, and whether world rank 0 speaks at the next step boundary:
// one allreduce of three float64s (every rank of every replica gets the same bits: every path of
// comm::Communicator::allreduce hands all ranks one sum). The loss has one contributor per slot
// of the replica (its TP rank 0).
Result<LiveRun::StepTotals> LiveRun::step_totals(double replica_loss) {
  const WorkerRole& role = job->role;
  const ReplicaBatch& mine = job->batches[static_cast<size_t>(role.replica)];
  std::array<double, 3> words{job->sync->accounted_sum_of_squares(), 0.0,
                              leader_has_news() ? 1.0 : 0.0};
  if (role.tp_rank == 0) {
    words[1] = replica_loss * static_cast<double>(mine.samples) / static_cast<double>(global_batch);
  }
  NTP_RETURN_IF_ERROR(
      job->world->allreduce(comm::View{words.data(), words.size(), comm::DType::kFloat64}));
  boundary_announced = words[2] != 0.0;
  StepTotals totals;
  totals.grad_norm = std::sqrt(words[0]);
  totals.loss = words[1];
  return totals;
}

// World rank 0 has a proposal of its rebalancer to tell, or join notices arrived since its last
// look (admission.h): a counter read, no store I/O.
bool LiveRun::leader_has_news() const {
  return job->role.world_rank == 0 && (proposal.has_value() || watch.join_notices() != join_seen);
}

// Clip + optimizer, the state before it kept (undo) so that a step not every survivor applied
// can be taken back.
Result<LiveRun::Update> LiveRun::apply_update(int64_t step, double grad_norm) {
  fault_point("optimizer");
  if (fault_point_fails("optimizer")) {  // this member fails where the others go on: a split
    job->abort_all("fault point: a failure in the optimizer");
    return unavailable("fault point: a failure in the optimizer of step " + std::to_string(step));
  }
  Update update;
  update.clip = c.grad_clip > 0.0 ? kernels::cpu::clip_coefficient(grad_norm, c.grad_clip) : 1.0f;
  update.lr = warmup_cosine_lr(step, c.warmup, c.steps, c.lr, c.min_lr);
  if (c.live_recovery) undo.save(*job);  // a job without live recovery never rolls back
  if (job->sharded) {
    // The update, its publication and the copies of the moments on DP peers are collectives
    // that can fail half done: until all are done the state is ahead of the step this worker
    // claims, and a re-formation takes the update back first.
    state_ahead = true;
    job->sharded->step(job->sync->owned_chunks(), job->model->params(), update.lr, update.clip);
    NTP_RETURN_IF_ERROR(job->sync->publish_values(job->sharded->master()));
    if (c.live_recovery) NTP_RETURN_IF_ERROR(mirror_moments(*job));
  } else {
    job->adamw->step(job->model->params(), update.lr, update.clip);
  }
  return update;
}

// Metrics: per-rank figures to the leader (a gather: the others get nothing back), which writes
// the step's line.
Status LiveRun::report_step(int64_t step, const StepTotals& totals, const Update& update,
                            const StepTimes& times, Clock::time_point step_start) {
  const WorkerRole& role = job->role;
  const SyncStats& stats = job->sync->stats();
  const RankFigures mine{times.fwd_bwd_s,
                         times.sync_wait_s,
                         times.optimizer_s,
                         stats.overlap_fraction(),
                         static_cast<double>(stats.fold_bytes_sent + stats.dp_bytes),
                         times.compute_s,
                         times.routed_load_peak};
  const bool leader = role.world_rank == 0;
  std::vector<double> figures(leader ? kRankFigures * static_cast<size_t>(role.world_size) : 0);
  // The step is committed here; should a peer die in this gather, the leader still logs the
  // step (with the figures it has) before the error starts a re-formation.
  const Status gathered = job->world->gather(
      comm::ConstView{mine.data(), mine.size(), comm::DType::kFloat64}, comm::view(figures), 0);
  const double step_s = seconds_since(step_start);  // the metrics' exchange included
  if (step > first_step) {  // the first step pays for first touches of every buffer
    timed_seconds += step_s;
    ++timed_steps;
  }
  if (!leader) return gathered;
  if (!gathered.ok()) {  // what arrived is partial: keep only this worker's own figures
    std::fill(figures.begin(), figures.end(), 0.0);
    std::copy(mine.begin(), mine.end(), figures.begin());
  }
  if (report) {
    report->step({step, totals.loss, update.lr, totals.grad_norm, update.clip, step_s,
                  static_cast<double>(global_batch * c.model.n_ctx) / step_s},
                 figures);
  }
  if (rebalancer && gathered.ok() && step > first_step) {
    NTP_RETURN_IF_ERROR(observe_speeds(figures));
  }
  return gathered;
}

// The leader's rebalancer takes the step's compute seconds of every rank; a proposal is announced
// in the next step's totals and carried out at the boundary after that step.
Status LiveRun::observe_speeds(const std::vector<double>& figures) {
  std::vector<double> compute(figures.size() / kRankFigures);
  for (size_t r = 0; r < compute.size(); ++r) {
    // A rank whose step was all waiting still did its work: at least a microsecond.
    compute[r] = std::max(1e-6, figures[r * kRankFigures + kComputeFigure]);
  }
  NTP_ASSIGN_OR_RETURN(std::optional<RebalanceTarget> target, rebalancer->observe(compute));
  if (target) proposal = std::move(target);
  return ok_status();
}

// Checkpoint (commit the previous save, whose write had a step to run, and start this one), then
// eval.
Status LiveRun::checkpoint_and_eval(int64_t step, elastic::Phase phase) {
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
  if ((c.eval_every > 0 && (step + 1) % c.eval_every == 0) || final_step) {
    progress.mark(elastic::Phase::kEval, step);
    NTP_ASSIGN_OR_RETURN(double eval_loss, evaluate(c, *job, val_batches));
    progress.mark(phase, step);
    summary.final_eval_loss = eval_loss;
    if (report) report->eval(step, eval_loss);
  }
  return ok_status();
}

}  // namespace ntp::train
