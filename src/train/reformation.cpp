// A LiveRun's re-formation: agree, commit, plan, rebuild, move the state, mark the epoch done
// (docs/recovery.md, "The protocol").
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <thread>

#include "launch/step_report.h"
#include "train/admission.h"
#include "train/fault_point.h"
#include "train/layout_codec.h"
#include "train/live_run.h"
#include "train/moment_reshard.h"
#include "train/speed_probe.h"
#include "train/state_reshard.h"

namespace ntp::train {
namespace {

// The whole job's reshard totals (every member calls it, joiners too).
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
}  // namespace

// ---- re-formation (docs/recovery.md): after a failure, to admit repairs, or to join. Agree on
//      the next epoch's list (elastic/agreement.h); take back an update the others did not
//      apply, together with its step; plan from the published base; build the new job; move
//      the base state into it; mark the epoch done. A fault at any point gives the epoch up and
//      agrees on the next one, from what was published. Returns the step to continue at. ----
Result<int64_t> LiveRun::reform(const Status& cause, const std::vector<int>& joiners,
                                double detect_s, const std::vector<std::vector<double>>* speeds) {
  const Clock::time_point t0 = Clock::now();
  RecoveryEvent event;
  event.detect_s = detect_s;
  event.cause = !cause.ok() ? cause.message() : speeds ? "rebalance" : job ? "repair" : "join";
  unwatch();
  boundary_announced = false;  // the new epoch's members start without the old one's totals
  if (job) job->abort_all(cause.ok() ? "re-forming to admit repaired slots" : cause.message());
  if (state_ahead) {  // a ZeRO-1 update that did not complete: the state goes back to the claim
    undo.restore(*job);
    state_ahead = false;
    events.log("update_undone", {{"step", committed}, {"epoch", job->epoch}});
  }
  saver.abandon();  // its records cannot all be gathered any more
  if (job && !joiners.empty() && job->role.world_rank == 0) {
    fault_point("admit");
    NTP_RETURN_IF_ERROR(admit(ctx, group, joiners, last));
  }
  event.old_degrees = job ? job->role.replica_degrees : std::vector<int>{};
  const std::vector<int> old_members = job ? slot_ranks(job->layout) : std::vector<int>{};
  // A re-formation's fault points count as the step it re-forms before (any step, for a joiner).
  set_fault_step(job ? committed : -1);
  int store_errors = 0;
  for (;;) {
    progress.mark(elastic::Phase::kReform, committed);
    NTP_ASSIGN_OR_RETURN(const elastic::MemberList list, agree_epoch(joiners, store_errors));
    if (list.parks(ctx.slot_rank)) {  // its replica left the job: wait outside, then join
      NTP_RETURN_IF_ERROR(sit_out(list));
      continue;
    }
    event.agree_s = seconds_since(t0);
    events.log("agreed", {{"epoch", list.epoch},
                          {"members", list.members},
                          {"base_epoch", list.base_epoch},
                          {"step", list.step}});
    reform_fault_point("reform_agreed", list);
    // -- the state this member re-forms from: the base epoch's, which it holds as its
    //    current job or as the base it kept; take back an update the others did not apply,
    //    together with the step it claims --
    NTP_ASSIGN_OR_RETURN(
        elastic::ReformPlan plan,
        elastic::plan_reform(list, ctx.slot_rank, {job ? job->epoch : -1, base ? base->epoch : -1},
                             committed, job && undo.holds(*job)));
    Job* source = plan.source_epoch < 0                    ? nullptr
                  : job && job->epoch == plan.source_epoch ? job.get()
                                                           : base.get();
    if (plan.roll_back) {
      undo.restore(*source);
      set_committed(list.step);
      event.rolled_back = true;
      events.log("rolled_back", {{"step", list.step}, {"epoch", list.epoch}});
    }
    // -- plan from the published base --
    NTP_ASSIGN_OR_RETURN(const shard::ClusterLayout from_layout, base_layout(list, source));
    NTP_ASSIGN_OR_RETURN(const std::vector<std::vector<double>> loads,
                         published_unit_loads(list.base_layout));
    Result<shard::ClusterLayout> layout = next_layout(c, *strategy, from_layout, list.members,
                                                      speeds, loads.empty() ? nullptr : &loads);
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
    Result<MovedState> state = moved.ok() ? move_state(list, source, from_layout, *next, event)
                                          : Result<MovedState>(moved);
    moved = state.status();
    moved = formed(list, moved);
    if (!moved.ok()) {
      unwatch();  // before `next` goes
      if (moved.code() != StatusCode::kUnavailable) return moved;
      events.log("step_failed", {{"epoch", list.epoch}, {"error", moved.message()}});
      if (!plane) agreement.report_failure(list.epoch);  // the runtime's formed() reported it
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
    if (!parked_why
             .empty()) {  // back in the job: its first step touches new buffers, as a repair's
      parked_why.clear();
      first_step = list.step;
      events.log("rejoined", {{"step", list.step}, {"epoch", list.epoch}});
      std::printf("slot %s: its replica is back in the job at step %lld (epoch %d)\n",
                  slot_name(slot).c_str(), static_cast<long long>(list.step + 1), list.epoch);
      std::fflush(stdout);
    }
    NTP_RETURN_IF_ERROR(report_reformed(list, *state, from_layout,
                                        slot_ranks(job->layout) == old_members, t0, event));
    return state->step;
  }
}

// The agreement on the next epoch's list. Store errors (an outage, a lock held by a stopped
// process) start it again, up to kAgreementStoreRetries per re-formation (`store_errors`).
// kAborted when this worker was declared dead (fenced). With the hierarchy, the list its runtime
// agreed (its domain's agreement and the leaders' round run on their own).
Result<elastic::MemberList> LiveRun::agree_epoch(const std::vector<int>& joiners,
                                                 int& store_errors) {
  if (plane) {
    NTP_CHECK(joiners.empty() && dropped.empty());  // not with the hierarchy yet (train_config)
    Result<elastic::MemberList> full = plane->next_list(kHierarchyListPatience);
    if (full.ok() || full.status().code() != StatusCode::kAborted) return full;
    return Status(StatusCode::kAborted, "slot " + slot_name(slot) + " was declared dead (" +
                                            full.status().message() + "); it leaves the job");
  }
  for (;;) {
    Result<elastic::MemberList> agreed = agreement.agree(
        last, {committed, ctx.restart_count}, job == nullptr, joiners,
        [this] {
          NTP_CHECK(job && job->epoch == last.epoch);  // `last` complete: this member did it
          return encode_layout(job->layout, measured_unit_loads());
        },
        dropped);
    if (agreed.ok()) return agreed;
    if (agreed.status().code() == StatusCode::kUnavailable &&
        ++store_errors < kAgreementStoreRetries) {
      events.log("agreement_retry", {{"error", agreed.status().message()}});
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      continue;
    }
    if (agreed.status().code() == StatusCode::kAborted) {
      return Status(StatusCode::kAborted, "slot " + slot_name(slot) + " was declared dead (" +
                                              agreed.status().message() + "); it leaves the job");
    }
    return agreed.status();
  }
}

void LiveRun::unwatch() {
  watch.disarm();
  if (plane) plane->watch(nullptr);
}

void LiveRun::report_failure(int epoch) {
  if (plane) {
    plane->report_failure(epoch);
  } else {
    agreement.report_failure(epoch);
  }
}

// The re-formation on `list` ended with `status`: marks it done when its groups are up and its
// state moved (the flat done key; the runtime's, which also fails its domain's epoch when
// `status` is kUnavailable). Returns the re-formation's outcome.
Status LiveRun::formed(const elastic::MemberList& list, const Status& status) {
  if (plane) {
    plane->formed(list, status);
    return status;
  }
  return status.ok() ? agreement.mark_done(list) : status;
}

void LiveRun::set_committed(int64_t step) {
  committed = step;
  if (plane) plane->set_committed(step);
}

// The layout of the epoch `list` re-forms from: the source job's, or (a member that holds no
// state) the published base's, or the initial one.
Result<shard::ClusterLayout> LiveRun::base_layout(const elastic::MemberList& list,
                                                  const Job* source) const {
  if (source != nullptr) return source->layout;
  if (list.base_layout.empty()) return shard::plan_cluster(cluster_spec(c), *strategy);
  return decode_layout(list.base_layout, cluster_spec(c), *strategy);
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
  const bool sharded = c.optimizer == OptimizerSharding::kSharded;
  const Result<int64_t> live =
      sharded ? move_zero_state(source, from, next) : move_replicated_state(source, from, next);
  if (live.ok()) {
    if (sharded) {
      next.sharded->set_steps_taken(out.step);
    } else {
      next.adamw->set_steps_taken(out.step);
    }
    moved_bytes = *live;
  } else if (live.status().code() != StatusCode::kNotFound) {
    return live.status();
  } else {  // every member saw the same: some state has no live copy
    NTP_ASSIGN_OR_RETURN(out.step, restore_from_checkpoint(list, live.status(), next, event));
  }
  event.reshard_s = seconds_since(t_reshard);
  reform_fault_point("reform_commit", list);
  NTP_ASSIGN_OR_RETURN(out.totals, reshard_totals(*next.world, moved_bytes, event.reshard_s));
  return out;
}

// The replicated optimizer's state: weights and both moments (train/state_reshard.h). Returns the
// bytes this member received.
Result<int64_t> LiveRun::move_replicated_state(Job* source, const shard::ClusterLayout& from,
                                               Job& next) {
  HeldState held{source ? &source->model->params() : nullptr, source ? &*source->adamw : nullptr};
  NTP_ASSIGN_OR_RETURN(ReshardStats stats,
                       execute_state_reshard(from, next.layout, slot, source ? &held : nullptr,
                                             {&next.model->params(), &*next.adamw}, *next.world));
  return stats.bytes_received;
}

// State with no live copy (`why`: every holder of some units, or a ZeRO-1 owner and the peer with
// its copy, were lost): the latest checkpoint, and with ZeRO-1 the new job's copies. Returns the
// checkpoint's step; stops the job when there is none.
Result<int64_t> LiveRun::restore_from_checkpoint(const elastic::MemberList& list, const Status& why,
                                                 Job& next, RecoveryEvent& event) {
  NTP_ASSIGN_OR_RETURN(std::optional<int64_t> loaded, load_latest_checkpoint(c, next));
  if (!loaded) {
    return stop_job(why.message() +
                        "; that state has no live copy and --save-dir holds no checkpoint to "
                        "fall back to; use --save-dir with --save-every to survive such a loss; "
                        "the job stops",
                    next.role.world_rank == 0);
  }
  events.log("state_lost", {{"epoch", list.epoch}, {"reason", why.message()}});
  event.state_from = "checkpoint";
  event.checkpoint_step = *loaded;
  // Every update from `step` on is gone from this member's state (counted by tests).
  events.log("restored", {{"step", *loaded}, {"epoch", list.epoch}});
  if (next.sharded) NTP_RETURN_IF_ERROR(mirror_moments(next));
  return *loaded;
}

// ZeRO-1: the values as the replicated reshard moves them, the master weights from them, the
// moments from their owners or the DP peers with their copies (MomentReshard), and the new
// job's copies. kNotFound, on every member alike, when the moments of some units are lost.
// Returns the bytes this member received.
Result<int64_t> LiveRun::move_zero_state(Job* source, const shard::ClusterLayout& from, Job& next) {
  HeldMoments held;
  if (source != nullptr) {
    ShardedAdamW& opt = *source->sharded;
    const std::vector<OwnedChunk>& owned = source->sync->owned_chunks();
    for (size_t k = 0; k < owned.size(); ++k) {
      held.owned.push_back({&owned[k].layout, &opt.exp_avg(k), &opt.exp_avg_sq(k)});
    }
    const std::vector<BlockLayout>& copies = source->sync->mirror_layouts();
    for (size_t k = 0; k < copies.size(); ++k) {
      held.copies.push_back({&copies[k], &opt.mirror_exp_avgs()[k], &opt.mirror_exp_avg_sqs()[k]});
    }
  }
  std::vector<MomentChunk> needed;
  const std::vector<OwnedChunk>& owned = next.sync->owned_chunks();
  for (size_t k = 0; k < owned.size(); ++k) {
    needed.push_back({&owned[k].layout, &next.sharded->exp_avg(k), &next.sharded->exp_avg_sq(k)});
  }
  std::vector<ParamGeometry> geometry;
  std::vector<std::string> names;
  for (const model::Param& p : next.model->params()) {
    geometry.push_back(ParamGeometry::of(p));
    names.push_back(p.name);
  }
  NTP_ASSIGN_OR_RETURN(MomentReshard moments,
                       MomentReshard::plan(held, needed, geometry, names, *next.world));
  HeldState values{source ? &source->model->params() : nullptr, nullptr};
  NTP_ASSIGN_OR_RETURN(ReshardStats stats,
                       execute_state_reshard(from, next.layout, slot, source ? &values : nullptr,
                                             {&next.model->params(), nullptr}, *next.world));
  NTP_ASSIGN_OR_RETURN(std::vector<std::vector<float>> master, next.sync->owned_values());
  for (size_t k = 0; k < master.size(); ++k) next.sharded->master(k) = std::move(master[k]);
  NTP_ASSIGN_OR_RETURN(int64_t moment_bytes, moments.run(*next.world));
  NTP_RETURN_IF_ERROR(mirror_moments(next));
  return stats.bytes_received + moment_bytes;
}

// The re-formation's metrics line (the leader's: a recovery, or a rebalance), its power plan, and
// the leader's rebalancer for the new layout (`same_members`: the measured speeds stay valid).
Status LiveRun::report_reformed(const elastic::MemberList& list, const MovedState& state,
                                const shard::ClusterLayout& before, bool same_members,
                                Clock::time_point t0, RecoveryEvent& event) {
  event.total_s = seconds_since(t0);
  reform_cost_s = event.total_s;
  event.reshard_bytes = state.totals.bytes;
  event.reshard_busiest_rank_bytes = state.totals.busiest_rank_bytes;
  event.reshard_s = state.totals.slowest_s;
  event.step = state.step;
  event.steps_redone = committed - state.step;
  event.epoch = list.epoch;
  if (event.old_degrees.empty()) event.old_degrees = job->role.replica_degrees;
  event.degrees = job->role.replica_degrees;
  set_committed(state.step);
  if (job->role.world_rank != 0) report.reset();  // one leader writes the metrics
  NTP_RETURN_IF_ERROR(open_report(true));
  if (report && event.cause == "rebalance") {
    report->rebalanced(event, before, job->layout, job->batches, rebalance_carried_out);
  } else if (report) {
    report->recovery(event, job->layout, job->batches);
  }
  rebalance_carried_out = RebalanceTarget{};
  if (boost && report) apply_power(job->paces, job->layout, power_control, report);
  return start_rebalancer(same_members);
}

// `list` parked this worker: it was measured too slow (--drop-below), or its domain would run
// below --min-tp, so its replica left the job. It drops every state it holds (it will receive all
// of it when it joins again), asks to join under a ticket of its own (a slow one once it
// recovered), and waits until world rank 0 admits it with enough of its domain (admission.h), or
// the job ends (kAborted). Then it re-forms as a joiner.
Status LiveRun::sit_out(const elastic::MemberList& list) {
  const bool too_slow = std::binary_search(dropped.begin(), dropped.end(), ctx.slot_rank);
  parked_why = too_slow ? "it was measured too slow (--drop-below)"
                        : "its replica would run below --min-tp " + std::to_string(c.min_tp);
  events.log("parked", {{"step", committed}, {"epoch", list.epoch}, {"reason", parked_why}});
  std::printf("slot %s: %s; it leaves the job at step %lld (epoch %d) until it can come back\n",
              slot_name(slot).c_str(), parked_why.c_str(), static_cast<long long>(committed + 1),
              list.epoch);
  std::fflush(stdout);
  unwatch();
  job.reset();
  base.reset();
  report.reset();
  rebalancer.reset();
  proposal.reset();
  state_ahead = false;
  if (too_slow) NTP_RETURN_IF_ERROR(await_recovery());
  const std::string ticket = std::to_string(ctx.restart_count) + ".p" + std::to_string(list.epoch);
  NTP_ASSIGN_OR_RETURN(last, wait_for_admission(ctx, group, ticket, progress, kParkedPatience));
  return ok_status();
}

// A worker dropped as too slow (--drop-below) asks to rejoin only once its own probe
// (speed_probe.h, at the compute factor of the job's current step) finds it back halfway from the
// bound to full speed, three probes in a row 200 ms apart: a rank hovering at the bound does not
// flap. kAborted when the job ends first.
Status LiveRun::await_recovery() {
  const double rejoin_at = 0.5 * (1.0 + c.drop_below);
  int in_a_row = 0;
  double speed = 0.0;
  while (in_a_row < 3) {
    progress.mark(elastic::Phase::kJoin, -1);
    NTP_RETURN_IF_ERROR(job_still_running(ctx, group));
    int64_t step = 0;  // the job's: the latest any worker started
    for (int r = 0; r < c.world_slots(); ++r) {
      Result<std::string> s = ctx.store->get(launch::step_key(r));
      if (s.ok()) step = std::max<int64_t>(step, std::atoll(s->c_str()));
    }
    speed = probe_speed(probe_baseline_s, ctx.compute_factor ? ctx.compute_factor(step) : 1.0);
    in_a_row = speed >= rejoin_at ? in_a_row + 1 : 0;
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  events.log("recovered", {{"speed", speed}});
  std::printf("slot %s: its probe runs at %.2f of its own full speed again; it asks to rejoin\n",
              slot_name(slot).c_str(), speed);
  std::fflush(stdout);
  return ok_status();
}

// A fault point of a re-formation, for this worker's rank or its role in `list`.
void LiveRun::reform_fault_point(const char* phase, const elastic::MemberList& list) {
  fault_point(phase);
  if (list.decider == ctx.slot_rank) {
    fault_point(phase, ("decider@" + std::to_string(list.epoch)).c_str());
  }
}

// The experts' loads in ClusterSpec::unit_loads' shape (the experts space's list; the others
// empty), or none.
std::vector<std::vector<double>> LiveRun::measured_unit_loads() const {
  if (expert_tokens.empty() || !job) return {};
  const std::vector<shard::UnitSpace>& spaces = job->layout.spec.spaces;
  std::vector<std::vector<double>> loads(spaces.size());
  bool any = false;
  for (size_t s = 0; s < spaces.size(); ++s) {
    if (spaces[s].name == "experts" &&
        spaces[s].units == static_cast<int64_t>(expert_tokens.size())) {
      loads[s] = expert_tokens;
      any = true;
    }
  }
  return any ? loads : std::vector<std::vector<double>>{};
}

}  // namespace ntp::train
