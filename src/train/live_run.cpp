#include "train/live_run.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>

#include "checkpoint/checkpoint_dir.h"
#include "comm/exit_notice.h"
#include "train/admission.h"
#include "train/fault_point.h"
#include "train/layout_codec.h"
#include "train/speed_probe.h"
#include "train/weight_source.h"

namespace ntp::train {
namespace {

elastic::AgreementConfig agreement_config(const TrainConfig& c, const WorkerContext& ctx,
                                          const std::string& group, elastic::Progress* progress) {
  elastic::AgreementConfig a;
  a.store = ctx.store;
  a.group = group;
  a.me = ctx.slot_rank;
  a.progress = progress;
  a.hang_detect = std::chrono::milliseconds(c.hang_detect_ms);
  a.window = 10 * a.hang_detect;
  a.domain_size = c.tp;  // a replica below --min-tp is parked, not listed (MemberList::parked)
  a.min_tp = c.min_tp;
  // A member's incarnation is the list's; a joiner's is the one its join request names (its
  // predecessor's exit notice must not mark it gone).
  a.incarnation = [&ctx, group](int id, const elastic::MemberList& list) {
    int restart = list.restarts[static_cast<size_t>(id)];
    if (!list.has(id)) {
      Result<std::string> asked = ctx.store->get(join_key(group, id));
      if (asked.ok()) restart = std::atoi(asked->c_str());
    }
    return comm::incarnation(ctx.attempt, restart);
  };
  // The agreement's fault points are the decider's: for its rank, or its role.
  a.on_phase = [](const char* phase, int epoch) {
    fault_point(phase);
    fault_point(phase, ("decider@" + std::to_string(epoch)).c_str());
  };
  return a;
}
}  // namespace

LiveRun::LiveRun(const TrainConfig& config, const WorkerContext& context, data::Batcher train,
                 data::Batcher val)
    : c(config),
      ctx(context),
      slot{context.slot_rank / config.tp, context.slot_rank % config.tp},
      train_batches(std::move(train)),
      val_batches(std::move(val)),
      strategy(make_strategy(config)),
      group("train/a" + std::to_string(context.attempt)),
      hang_detect(config.hang_detect_ms),
      // Constructed on the training thread, which runs the job: its CPU clock is that thread's.
      progress(context.restart_count, elastic::Progress::Thread::current()),
      heartbeat(config.control_plane == ControlPlane::kHierarchy
                    ? nullptr
                    : std::make_unique<comm::Heartbeat>(
                          context.beat_store ? context.beat_store : context.store, group,
                          context.slot_rank, elastic::liveness_period(hang_detect),
                          [this] { return progress.token(); })),
      events(config.out_dir, context.slot_rank),
      watch(context.store, elastic::liveness_period(hang_detect), hang_detect, &progress,
            [this] { fenced_while_stuck(); }),
      agreement(agreement_config(config, context, group, &progress)),
      plane(config.control_plane == ControlPlane::kHierarchy
                ? std::make_unique<HierarchyPlane>(config, context, &progress,
                                                   [this] { fenced_while_stuck(); })
                : nullptr),
      boost(config.batch_policy == BatchPolicy::kBoost),
      saver(config.save_dir, config.keep_last,
            "d" + std::to_string(slot.domain) + "s" + std::to_string(slot.slot)),
      global_batch(config.global_batch()) {
  progress.mark(elastic::Phase::kSetup, -1);
  comm::observe_waits(&progress);  // this thread's waits on its peers are not stuck work
}

void LiveRun::fenced_while_stuck() {
  events.log("fenced", {{"reason", "declared dead while its training thread was stuck"}});
  std::printf("slot %s: declared dead while its training thread was stuck; it leaves the job\n",
              slot_name(slot).c_str());
  std::fflush(stdout);
  std::_Exit(1);
}

// From here on, a fault anywhere in the job aborts this worker's pending operations at once, and
// the re-formation that follows finds the agreement's stream connection already open.
void LiveRun::watch_job(Job& j, const elastic::MemberList& list) {
  if (plane) {  // the runtime watches; a re-formation of its domain aborts this job
    plane->watch(&j);
    return;
  }
  agreement.prepare();
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

// ZeRO-1 with live recovery: every owned chunk's moments copied to the next member of its DP set.
Status LiveRun::mirror_moments(Job& j) {
  ShardedAdamW& opt = *j.sharded;
  return j.sync->mirror_moments(opt.exp_avgs(), opt.exp_avg_sqs(), opt.mirror_exp_avgs(),
                                opt.mirror_exp_avg_sqs());
}

Result<LiveRun::StepBoundary> LiveRun::step_boundary() {
  if (!boundary_announced) return StepBoundary{};  // the common case: no collective at all
  boundary_announced = false;
  const auto slots = static_cast<size_t>(job->layout.spec.domains * job->layout.spec.domain_size);
  const auto tp = static_cast<size_t>(job->layout.spec.domain_size);
  // [slots] join flags, [slots] drop flags, then 0 (go on), 1 (rebalance) or 2 (equal shares
  // again), then [slots] speeds, domain-major.
  const size_t mode = 2 * slots;
  std::vector<double> words(3 * slots + 1, 0.0);
  if (job->role.world_rank == 0) {
    for (int r : joiners_asking(ctx, group, *job, c.min_tp, watch.join_notices(), join_seen)) {
      words[static_cast<size_t>(r)] = 1.0;
    }
    if (proposal) {
      for (int r : proposal->drop) words[slots + static_cast<size_t>(r)] = 1.0;
      if (proposal->drop.empty()) words[mode] = proposal->speeds.empty() ? 2.0 : 1.0;
      for (size_t d = 0; d < proposal->speeds.size(); ++d) {
        for (size_t l = 0; l < tp; ++l) words[mode + 1 + d * tp + l] = proposal->speeds[d][l];
      }
      rebalance_carried_out = *proposal;
      proposal.reset();
    }
  }
  NTP_RETURN_IF_ERROR(job->world->broadcast(comm::view(words), 0));
  StepBoundary out;
  for (size_t r = 0; r < slots; ++r) {
    if (words[r] != 0.0) out.joiners.push_back(static_cast<int>(r));
    if (words[slots + r] != 0.0) out.drops.push_back(static_cast<int>(r));
  }
  if (words[mode] != 0.0) {
    out.speeds.emplace();
    if (words[mode] == 1.0) {
      for (size_t d = 0; d * tp < slots; ++d) {
        out.speeds->emplace_back(words.begin() + static_cast<long>(mode + 1 + d * tp),
                                 words.begin() + static_cast<long>(mode + 1 + (d + 1) * tp));
      }
    }
  }
  return out;
}

// The leader measures speeds with --rebalance (another worker, or without it, holds none).
Status LiveRun::start_rebalancer(bool same_members) {
  proposal.reset();
  if (!c.rebalance || job->role.world_rank != 0) {
    rebalancer.reset();
    return ok_status();
  }
  const double cost = c.rebalance_cost_s >= 0.0 ? c.rebalance_cost_s : reform_cost_s;
  if (rebalancer && same_members) {
    rebalancer->relayout(job->layout, job->batches);
    rebalancer->set_reform_cost(cost);
    return ok_status();
  }
  SpeedEstimatorOptions options;
  options.reform_cost_s = cost;
  options.share_by_pace = c.batch_policy != BatchPolicy::kKeep;
  if (c.drops_slow_ranks()) options.drop_below = c.drop_below;
  NTP_ASSIGN_OR_RETURN(Rebalancer fresh, Rebalancer::create(job->layout, job->batches, options,
                                                            c.drops_slow_ranks()));
  rebalancer.emplace(std::move(fresh));
  return ok_status();
}

// Live recovery cannot go on: every survivor stops, one says why (kFailedPrecondition), and the
// workers parked outside the job leave too.
Status LiveRun::stop_job(const std::string& why, bool speaks) {
  stop_speaks = speaks;
  (void)ctx.store->set(stopped_key(group), "1");  // best effort: they also leave at a deadline
  return failed_precondition(why);
}

Result<std::optional<TrainSummary>> LiveRun::start() {
  if (c.drops_slow_ranks()) probe_baseline_s = probe_cpu_seconds();  // at full speed, before any
  if (ctx.restart_count > 0) {
    // ---- a repair: wait to be admitted at a step boundary, then join through the same
    //      re-formation as any member, holding nothing ----
    // A silent record left for this slot's previous process (a hung one) names that process's
    // progress, which this one's never matches (the token leads with the incarnation,
    // elastic/progress.h); the record goes anyway, so that nothing reads a stale one.
    elastic::forget_silent_record(*ctx.store, group, ctx.slot_rank);
    Result<elastic::MemberList> admitted = wait_for_admission(
        ctx, group, std::to_string(ctx.restart_count), progress, kRepairPatience);
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
    set_committed(first_step);
    last_step = c.stop_after > 0 ? std::min(c.steps, first_step + c.stop_after) : c.steps;
    events.log("joined", {{"step", first_step}, {"epoch", job->epoch}});
    std::printf("slot %s: repaired, joined at step %lld (epoch %d)\n", slot_name(slot).c_str(),
                static_cast<long long>(first_step + 1), job->epoch);
    std::fflush(stdout);
    NTP_RETURN_IF_ERROR(start_rebalancer(false));
    return std::optional<TrainSummary>();
  }
  // ---- the first job: layout -> this worker's role -> communicators, model shard, sync,
  //      optimizer ----
  NTP_ASSIGN_OR_RETURN(shard::ClusterLayout layout,
                       shard::plan_cluster(cluster_spec(c), *strategy));
  last = elastic::initial_list(slot_ranks(layout), c.world_slots());
  job = std::make_unique<Job>();
  watch_job(*job, last);
  const Clock::time_point build_start = Clock::now();
  NTP_RETURN_IF_ERROR(build_job(*job, c, ctx, std::move(layout), slot, 0, InitialState::kDrawn));
  if (plane) plane->start();  // every worker beats: the first job's rendezvous needed them all
  // A re-formation rebuilds the same and reshards what moves: until one is measured, what a
  // rebalance costs is taken as this build's time.
  reform_cost_s = seconds_since(build_start);
  std::string resume_dir = c.resume;
  if (resume_dir == "auto") {
    resume_dir = checkpoint::latest_step_dir(c.save_dir).ok() ? c.save_dir : "";
  }
  // ---- or a new run from another model's weights (Hugging Face or ntp), at step 0: read before
  //      anything is written, so that a bad source leaves no trace ----
  std::string initialized_from;
  if (resume_dir.empty() && !c.init_from.empty()) {
    Result<WeightSource> source = open_weight_source(c.init_from);
    WorkerState state = worker_state();
    const Status loaded = source.ok() ? load_values(source->read, state) : source.status();
    if (!loaded.ok()) {
      return invalid_argument("--init-from " + c.init_from + ": " + loaded.message());
    }
    initialized_from = source->dir;
  }
  NTP_RETURN_IF_ERROR(open_report(!c.resume.empty()));
  if (boost && report) apply_power(job->paces, job->layout, power_control, report);
  if (!c.dump_dir.empty()) std::filesystem::create_directories(c.dump_dir);
  if (!initialized_from.empty()) {
    events.log("initialized", {{"dir", initialized_from}});
    if (report) report->initialized(initialized_from);
  }

  // ---- resume: weights, moments and the step from a checkpoint written at any layout ----
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
  if (job->sharded && c.live_recovery) NTP_RETURN_IF_ERROR(mirror_moments(*job));
  set_committed(first_step);
  last_step = c.stop_after > 0 ? std::min(c.steps, first_step + c.stop_after) : c.steps;
  NTP_RETURN_IF_ERROR(start_rebalancer(false));
  return std::optional<TrainSummary>();
}

// Ends the job as the re-formation said: fenced (this worker leaves, writing nothing), or
// stopped (live recovery cannot go on; every survivor stops, one says why), or, for a worker
// parked outside the job, the job ended before its replica came back.
TrainSummary LiveRun::left_job(const Status& why) {
  if (!parked_why.empty() && why.code() == StatusCode::kAborted) {
    summary.took_part = false;
    summary.left = "out of the job (" + parked_why + "), " + why.message();
    events.log("left", {{"reason", summary.left}});
  } else if (why.code() == StatusCode::kAborted) {
    summary.took_part = false;
    summary.fenced = true;
    summary.left = why.message();
    events.log("fenced", {{"reason", summary.left}});
  } else {
    summary.stopped = why.message();
    summary.speaks = stop_speaks;
    events.log("stopped", {{"reason", summary.stopped}});
  }
  unwatch();
  return summary;
}

Result<TrainSummary> LiveRun::run() {
  // ---- the loop: a failed step is redone on the re-formed job ----
  summary.steps = first_step;
  for (int64_t step = first_step; step < last_step;) {
    if (ctx.on_step) ctx.on_step(step);
    Result<StepBoundary> boundary = step_boundary();
    Status status = boundary.status();
    const bool admitting = status.ok() && !boundary->joiners.empty();
    const bool dropping = status.ok() && !admitting && !boundary->drops.empty();
    const bool rebalancing = status.ok() && !admitting && !dropping && boundary->speeds.has_value();
    const bool reforming = admitting || dropping || rebalancing;
    const Clock::time_point step_start = Clock::now();
    if (status.ok() && !reforming) status = train_step(step);
    if (status.ok() && !reforming) {
      ++step;
      continue;
    }
    if (!status.ok() && (!peer_failure(status) || !c.live_recovery)) return status;
    if (!status.ok()) {
      // From here the failure is handled (a report, the agreement): the re-formation's allowance,
      // not a step's, so that a slow store or disk on a loaded host is not taken for a hang.
      progress.mark(elastic::Phase::kReform, committed);
      events.log("step_failed",
                 {{"step", step}, {"epoch", job->epoch}, {"error", status.message()}});
      report_failure(job->epoch);  // the members whose operations do not touch ours
      std::printf("slot %s: step %lld failed (%s); re-forming the job\n", slot_name(slot).c_str(),
                  static_cast<long long>(step + 1), status.message().c_str());
      std::fflush(stdout);
    }
    if (dropping) dropped = boundary->drops;
    Result<int64_t> next = reform(status, admitting ? boundary->joiners : std::vector<int>{},
                                  status.ok() ? 0.0 : seconds_since(step_start),
                                  rebalancing ? &*boundary->speeds : nullptr);
    dropped.clear();
    if (!next.ok() && ends_job(next.status())) return left_job(next.status());
    NTP_ASSIGN_OR_RETURN(step, std::move(next));
    summary.steps = committed;
  }
  // ---- the last checkpoint's commit is part of the job: a fault there re-forms too ----
  for (;;) {
    const Status saved = c.save_dir.empty() ? finish_pending_save() : save_checkpoint_now();
    if (saved.ok()) break;
    if (!peer_failure(saved) || !c.live_recovery) return saved;
    progress.mark(elastic::Phase::kReform, committed);
    report_failure(job->epoch);
    Result<int64_t> next = reform(saved, {}, 0.0);
    if (!next.ok() && ends_job(next.status())) return left_job(next.status());
    NTP_RETURN_IF_ERROR(next.status());
  }
  progress.mark(elastic::Phase::kFinished, committed);
  events.log("finished", {{"step", committed}, {"epoch", job->epoch}});
  unwatch();
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
