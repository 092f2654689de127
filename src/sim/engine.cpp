#include "sim/engine.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <queue>

#include "sim/cluster_state.h"
#include "sim/slow_events.h"
#include "sim/slow_state.h"

namespace ntp::sim {

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

struct Repair {
  double time_s;
  std::int64_t first_gpu;
  int count;
  std::uint32_t id;  // the failure event that took the GPUs down
  bool operator>(const Repair& o) const { return time_s > o.time_s; }
};

struct SlowEnd {
  double time_s;
  std::int64_t gpu;
  bool operator>(const SlowEnd& o) const { return time_s > o.time_s; }
};

// Per-policy running totals and transient state.
struct PolicyRun {
  PolicySpec spec;
  PolicyRates rates;
  double base_capacity = 0;  // capacity without the slowed GPUs (= rates.capacity without)
  double base_capacity_integral = 0;
  double tau_s = 0, ckpt_eff = 1;  // checkpoint interval and the fraction of time not writing
  double spare_groups = 0;         // fixed-batch: spare groups available
  bool paused = false;
  double down_until = -kInf, up_since = 0;
  double capacity_integral = 0, work = 0, energy_j = 0, paused_s = 0, down_s = 0;
  double max_need = 0;
  double work_at_sample = 0;  // work at the previous time-series point
  int pauses = 0, restarts = 0;
};

bool restarts_on_failure(PolicyKind k) { return !recovers_live(k); }

}  // namespace

Simulator::Simulator(const SimConfig& config, std::vector<FailureEvent> trace, bool use_trace)
    : config_(config), workload_(config), trace_(std::move(trace)), use_trace_(use_trace) {
  double rate = static_cast<double>(config_.system.gpus) * config_.failures.rate_per_gpu_day *
                config_.failures.rate_multiplier / 86400.0;
  if (use_trace_) {
    rate = static_cast<double>(trace_.size()) / (config_.run.days * 86400.0);
  }
  const double write = config_.recovery.checkpoint_write_seconds;
  tau_s_ = rate > 0 ? std::sqrt(2.0 * write / rate) : kInf;
  failure_rate_ = rate;
  // Episodes DROP takes out (factor below drop_below), per second over the cluster.
  const FailSlowConfig& f = config_.fail_slow;
  if (f.active()) {
    double below = 0, total = 0;
    for (std::size_t i = 0; i < f.factors.size(); ++i) {
      const double w = f.factor_weights.empty() ? 1.0 : f.factor_weights[i];
      total += w;
      if (f.factors[i] < f.drop_below) below += w;
    }
    drop_rate_ = static_cast<double>(config_.system.gpus) * f.rate_per_gpu_day * f.rate_multiplier /
                 86400.0 * below / total;
  }
}

double Simulator::checkpoint_interval_s(const PolicySpec& policy) const {
  if (policy.slow != SlowMitigation::kDrop || recovers_live(policy.kind) || drop_rate_ <= 0) {
    return tau_s_;
  }
  return std::sqrt(2.0 * config_.recovery.checkpoint_write_seconds / (failure_rate_ + drop_rate_));
}

Result<Simulator> Simulator::create(const SimConfig& config) {
  std::vector<FailureEvent> trace;
  const bool use_trace = !config.failures.trace.empty();
  if (use_trace) {
    NTP_ASSIGN_OR_RETURN(trace, load_trace(config.failures.trace, config));
  }
  Simulator sim(config, std::move(trace), use_trace);
  const bool live = std::any_of(config.run.policies.begin(), config.run.policies.end(),
                                [](const PolicySpec& p) { return recovers_live(p.kind); });
  if (live && config.recovery.live_recovery_seconds < 0) {
    NTP_ASSIGN_OR_RETURN(RecoveryCostModel model, RecoveryCostModel::create(config));
    sim.recovery_.emplace(std::move(model));
  }
  return sim;
}

Simulator Simulator::without_fail_slow() const {
  SimConfig config = config_;
  config.fail_slow.enabled = false;
  Simulator sim(config, trace_, use_trace_);
  sim.recovery_ = recovery_;  // the cost model does not depend on [fail_slow]
  return sim;
}

TrialResult Simulator::run_trial(int trial, bool record_series) const {
  const SimConfig& c = config_;
  ClusterState state(c, workload_, power_model_);
  const double end_s = c.run.days * 86400.0;
  const double replicas = static_cast<double>(state.replicas());
  const double gpus = static_cast<double>(c.system.gpus);
  const double tdp = c.system.tdp_watts;
  const double idle = c.system.idle_power_fraction;
  const double write = c.recovery.checkpoint_write_seconds;
  auto efficiency = [&](double tau) {
    return std::isinf(tau) || tau + write <= 0 ? 1.0 : tau / (tau + write);
  };
  const int gpd = state.groups_per_domain();
  const double slack_groups =
      (1.0 - c.run.target_batch_fraction) * replicas * static_cast<double>(c.parallel.pp);

  std::vector<PolicyRun> runs(c.run.policies.size());
  for (std::size_t i = 0; i < runs.size(); ++i) {
    runs[i].spec = c.run.policies[i];
    const int spares = runs[i].spec.kind == PolicyKind::kSpares
                           ? std::max(runs[i].spec.spares, c.run.spares)
                           : c.run.spares;
    runs[i].spare_groups = static_cast<double>(spares) * gpd;
    runs[i].tau_s = checkpoint_interval_s(runs[i].spec);
    runs[i].ckpt_eff = efficiency(runs[i].tau_s);
  }

  // Warm start: run the failure process for 5 mean repair times before time 0 so that the
  // failed/repair state at time 0 is (nearly) stationary.
  const double warmup_s =
      (!use_trace_ && c.failures.warm_start)
          ? 5.0 * std::max(c.failures.hardware_repair_hours, c.failures.software_recovery_hours) *
                3600.0
          : 0.0;
  FailureProcess process(c, Rng(c.run.seed).fork(static_cast<std::uint64_t>(trial)), -warmup_s);
  // Fail-slow episodes warm up over 5 mean durations of their own.
  const bool slow_on = c.fail_slow.active();
  const double slow_warmup_s =
      slow_on && c.failures.warm_start ? 5.0 * c.fail_slow.mean_hours * 3600.0 : 0.0;
  SlowProcess slow_process(
      c, Rng(c.run.seed).fork(static_cast<std::uint64_t>(trial)).fork(kSlowStream), -slow_warmup_s);
  SlowState slow(c, workload_, power_model_);
  std::priority_queue<SlowEnd, std::vector<SlowEnd>, std::greater<>> slow_ends;
  SlowEvent pending_slow = slow_process.next();
  double slow_gpu_integral = 0;
  std::size_t trace_pos = 0;
  auto next_failure = [&]() -> FailureEvent {
    if (use_trace_) {
      if (trace_pos < trace_.size()) return trace_[trace_pos++];
      FailureEvent none;
      none.time_s = kInf;
      return none;
    }
    return process.next();
  };

  TrialResult result;
  std::priority_queue<Repair, std::vector<Repair>, std::greater<>> repairs;
  FailureEvent pending = next_failure();
  const double sample_s = c.run.sample_hours * 3600.0;
  double next_sample = record_series ? sample_s : kInf;
  double failed_gpu_integral = 0;
  std::vector<std::uint32_t> owner(static_cast<std::size_t>(c.system.gpus), 0);
  std::uint32_t event_id = 0;

  auto refresh = [&](double now) {
    for (PolicyRun& r : runs) {
      r.rates = state.rates(r.spec);
      r.base_capacity = r.rates.capacity;
      if (slow_on) r.rates = slow.adjust(state, r.spec, r.rates);
      const bool was_paused = r.paused;
      r.paused = c.run.fixed_batch && r.spec.kind != PolicyKind::kCkptRestart &&
                 r.rates.need_groups > r.spare_groups + slack_groups + 1e-9;
      if (now >= 0) {
        if (r.paused && !was_paused) ++r.pauses;
        r.max_need = std::max(r.max_need, r.rates.need_groups);
      }
    }
  };
  // Effective work rate (replica units) of a policy while up.
  auto up_rate = [&](const PolicyRun& r) {
    if (r.paused) return 0.0;
    return c.run.fixed_batch && r.spec.kind != PolicyKind::kCkptRestart
               ? c.run.target_batch_fraction * replicas
               : r.rates.capacity;
  };
  auto advance = [&](double from, double to) {
    from = std::max(from, 0.0);
    to = std::min(to, end_s);
    if (to <= from) return;
    const double dt = to - from;
    const double healthy = gpus - static_cast<double>(state.failed_gpus());
    failed_gpu_integral += static_cast<double>(state.failed_gpus()) * dt;
    slow_gpu_integral += static_cast<double>(slow.slow_gpus()) * dt;
    for (PolicyRun& r : runs) {
      r.capacity_integral += r.rates.capacity * dt;
      r.base_capacity_integral += r.base_capacity * dt;
      const double down = std::clamp(r.down_until - from, 0.0, dt);
      const double up = dt - down;
      r.down_s += down;
      const double idle_watts = tdp * idle * healthy;
      if (r.paused) {
        r.paused_s += up;
        r.energy_j += idle_watts * dt;
        continue;
      }
      r.work += up_rate(r) * up * r.ckpt_eff;
      double busy_watts =
          tdp * (r.rates.power_units + idle * std::max(0.0, healthy - r.rates.active_gpus));
      if (c.run.fixed_batch && r.spec.kind != PolicyKind::kCkptRestart) {
        // Spare groups filling the batch run at TDP (whole groups, as many as the need).
        busy_watts +=
            tdp * c.parallel.tp *
            std::min(r.spare_groups, std::ceil(std::max(0.0, r.rates.need_groups) - 1e-9));
      }
      r.energy_j += busy_watts * up + idle_watts * down;
    }
  };
  // The live recovery of the event that just changed `state` (seconds; 0 when the running job is
  // unaffected). A fixed live_recovery_seconds applies to every failure and repair.
  auto live_cost = [&](bool failure, const std::vector<DegreeChange>& changes) {
    if (!recovery_) return c.recovery.live_recovery_seconds;
    const RecoveryCost cost =
        recovery_->event(failure, changes, state.min_degree_of_others(changes));
    if (cost.total_s > 0) {
      RecoveryTotals& t = result.live_recovery;
      ++(failure ? t.failures : t.repairs);
      t.sum += cost;
    }
    return cost.total_s;
  };
  // A restart from the last checkpoint at `now`: the work since it is lost, then the restart (and
  // for CKPT-RESTART the replacement hardware).
  auto restart = [&](PolicyRun& r, double now) {
    double cost = c.recovery.restart_minutes * 60.0;
    if (r.spec.kind == PolicyKind::kCkptRestart) cost += c.recovery.replace_hours * 3600.0;
    if (now >= r.down_until && !r.paused) {
      const double since = now - std::max(r.up_since, 0.0);
      const double lost =
          std::isinf(r.tau_s) ? since : (r.tau_s > 0 ? std::fmod(since, r.tau_s) : 0.0);
      r.work = std::max(0.0, r.work - lost * up_rate(r) * r.ckpt_eff);
    }
    r.down_until = std::max(r.down_until, now + cost);
    r.up_since = r.down_until;
    ++r.restarts;
  };
  auto on_failure = [&](double now) {
    if (now < 0) return;
    const double live = live_cost(true, state.last_changes());
    for (PolicyRun& r : runs) {
      if (restarts_on_failure(r.spec.kind)) {
        restart(r, now);
      } else if (live > 0) {
        r.down_until = std::max(r.down_until, now) + live;
      }
    }
  };
  auto on_repair = [&](double now, const std::vector<DegreeChange>& changes) {
    if (now < 0) return;
    const double live = live_cost(false, changes);
    for (PolicyRun& r : runs) {
      if (recovers_live(r.spec.kind) && live > 0) {
        r.down_until = std::max(r.down_until, now) + live;
      }
    }
  };

  // DROP's view of the GPU's group and replica, before and after an episode starts or ends.
  const bool any_drop = slow_on && std::any_of(runs.begin(), runs.end(), [](const PolicyRun& r) {
                          return r.spec.slow == SlowMitigation::kDrop;
                        });
  const std::int64_t tp = c.parallel.tp, replica_gpus = tp * c.parallel.pp;
  struct DropView {
    int group_dropped = 0;
    bool replica_runs = false;  // DP-DROP: no failed group and no dropped GPU
  };
  auto drop_view = [&](std::int64_t gpu) {
    const std::int64_t group = gpu / tp, replica = gpu / replica_gpus;
    return DropView{slow.dropped(state, group * tp, tp),
                    state.replica_bad(replica) == 0 &&
                        slow.dropped(state, replica * replica_gpus, replica_gpus) == 0};
  };
  // `gpu` left (`leaving`) or rejoined the job under DROP at `now`; call before refresh() so that
  // a restart's lost work is counted at the rates before the change.
  auto on_drop = [&](double now, std::int64_t gpu, bool leaving, const DropView& before,
                     const DropView& after) {
    if (now < 0) return;
    const std::int64_t group = gpu / tp;
    const int failed = state.group_failed(group);
    const int from = state.degree_for(failed + before.group_dropped);
    const int to = state.degree_for(failed + after.group_dropped);
    for (PolicyRun& r : runs) {
      if (r.spec.slow != SlowMitigation::kDrop) continue;
      const bool changes = is_ntp(r.spec.kind) ? from != to
                           : r.spec.kind == PolicyKind::kCkptRestart
                               ? leaving
                               : before.replica_runs != after.replica_runs;
      if (!changes) continue;
      if (restarts_on_failure(r.spec.kind)) {
        if (leaving) restart(r, now);
        continue;
      }
      double cost = c.recovery.live_recovery_seconds;
      if (recovery_) {
        const int others = state.min_degree_of_others({{group, from, state.degree_for(failed)}});
        cost = recovery_->event(false, {{group, from, to}}, others).total_s;
      }
      if (cost > 0) r.down_until = std::max(r.down_until, now) + cost;
    }
  };

  double now = -std::max(warmup_s, slow_warmup_s);
  refresh(now);
  bool started = now >= 0;
  while (true) {
    const double t_fail = pending.time_s;
    const double t_rep = repairs.empty() ? kInf : repairs.top().time_s;
    const double t_slow = pending_slow.time_s;
    const double t_slow_end = slow_ends.empty() ? kInf : slow_ends.top().time_s;
    double t = std::min({t_fail, t_rep, next_sample, end_s, t_slow, t_slow_end});
    if (!started && t >= 0) {
      // Crossing time 0: reset the per-policy maxima to the state at time 0.
      refresh(0.0);
      for (PolicyRun& r : runs) {
        r.max_need = std::max(0.0, r.rates.need_groups);
        r.pauses = r.paused ? 1 : 0;
      }
      result.max_failed_groups = state.failed_groups();
      started = true;
      now = 0;
      t = std::min({t_fail, t_rep, next_sample, end_s, t_slow, t_slow_end});
    }
    advance(now, t);
    now = t;
    if (t == next_sample) {
      // Each point covers the interval that ends at t: useful work delivered in it (restarts,
      // lost work and checkpoints included) over what the failure-free cluster does; negative
      // when a restart threw away more work than the interval delivered.
      SeriesPoint p;
      p.hours = t / 3600.0;
      p.failed_gpus = state.failed_gpus();
      p.failed_groups = state.failed_groups();
      for (PolicyRun& r : runs) {
        p.capacity.push_back((r.work - r.work_at_sample) / (sample_s * replicas));
        r.work_at_sample = r.work;
      }
      result.series.push_back(std::move(p));
      next_sample += sample_s;
      if (t < end_s) continue;
    }
    if (t >= end_s) break;
    if (t == t_slow_end) {
      const std::int64_t gpu = slow_ends.top().gpu;
      slow_ends.pop();
      const bool drops = any_drop && slow.factor(gpu) < slow.drop_below() && !state.is_failed(gpu);
      const DropView before = drops ? drop_view(gpu) : DropView{};
      slow.end(gpu);
      if (drops) on_drop(t, gpu, false, before, drop_view(gpu));
      refresh(t);
      continue;
    }
    if (t == t_slow) {
      const std::int64_t gpu = pending_slow.gpu;
      const bool drops =
          any_drop && pending_slow.factor < slow.drop_below() && !state.is_failed(gpu);
      const DropView before = drops ? drop_view(gpu) : DropView{};
      // An episode on a GPU that is already slow changes nothing (thinning).
      if (slow.start(gpu, pending_slow.factor)) {
        slow_ends.push({t + pending_slow.duration_s, gpu});
        if (t >= 0) ++result.slow_episodes;
        if (drops) on_drop(t, gpu, true, before, drop_view(gpu));
        refresh(t);
      }
      pending_slow = slow_process.next();
      continue;
    }
    if (t == t_rep) {
      const Repair rep = repairs.top();
      repairs.pop();
      ++result.events;
      // Only the GPUs this failure took down come back; a GPU that was already down when it hit
      // belongs to the earlier failure and keeps that one's repair time.
      int changed = 0;
      std::vector<DegreeChange> changes;  // per group: degree before the first GPU, after the last
      for (std::int64_t g = rep.first_gpu; g < rep.first_gpu + rep.count; ++g) {
        if (owner[g] != rep.id || state.repair(g, 1) == 0) continue;
        ++changed;
        for (const DegreeChange& ch : state.last_changes()) {
          auto it = std::find_if(changes.begin(), changes.end(),
                                 [&](const DegreeChange& x) { return x.group == ch.group; });
          if (it == changes.end()) {
            changes.push_back(ch);
          } else {
            it->to = ch.to;
          }
        }
      }
      if (changed > 0) {
        refresh(t);
        on_repair(t, changes);
      }
      continue;
    }
    // Failure.
    ++result.events;
    ++event_id;
    for (std::int64_t g = pending.first_gpu; g < pending.first_gpu + pending.count; ++g) {
      if (!state.is_failed(g)) owner[g] = event_id;
    }
    const int changed = state.fail(pending.first_gpu, pending.count);
    if (changed > 0) {
      if (t >= 0) ++result.failures;
      repairs.push({t + pending.repair_s, pending.first_gpu, pending.count, event_id});
      on_failure(t);
      refresh(t);
      if (t >= 0)
        result.max_failed_groups = std::max(result.max_failed_groups, state.failed_groups());
    }
    pending = next_failure();
  }

  for (const PolicyRun& r : runs) {
    PolicyOutcome o;
    const double ideal = replicas * end_s;
    o.throughput_loss = std::max(0.0, 1.0 - r.capacity_integral / ideal);
    o.goodput = r.work / ideal;
    o.energy_mwh = r.energy_j / 3.6e9;
    const double ideal_energy_per_work = gpus * tdp / replicas;
    o.energy_per_work = r.work > 0 ? (r.energy_j / r.work) / ideal_energy_per_work : kInf;
    o.paused_hours = r.paused_s / 3600.0;
    o.down_hours = r.down_s / 3600.0;
    o.pauses = r.pauses;
    o.restarts = r.restarts;
    o.spares_needed = static_cast<int>(std::ceil(std::max(0.0, r.max_need) / gpd - 1e-9));
    o.fail_slow_loss = (r.base_capacity_integral - r.capacity_integral) / ideal;
    result.policies.push_back(o);
  }
  result.mean_failed_gpus = failed_gpu_integral / end_s;
  result.mean_slow_gpus = slow_gpu_integral / end_s;
  return result;
}

}  // namespace ntp::sim
