#include "sim/slow_state.h"

#include <algorithm>

#include "power/boost_planner.h"

namespace ntp::sim {

SlowState::SlowState(const SimConfig& config, const Workload& workload,
                     const power::PowerModel& model)
    : workload_(workload),
      model_(model),
      drop_below_(config.fail_slow.drop_below),
      tdp_watts_(config.system.tdp_watts),
      headroom_(config.power.headroom),
      tp_(config.parallel.tp),
      pp_(config.parallel.pp),
      groups_per_domain_(config.parallel.domain_size / config.parallel.tp) {}

bool SlowState::start(std::int64_t gpu, double factor) {
  NTP_CHECK(factor > 0 && factor <= 1);
  return factor_.emplace(gpu, factor).second;
}

void SlowState::end(std::int64_t gpu) { NTP_CHECK(factor_.erase(gpu) == 1); }

double SlowState::factor(std::int64_t gpu) const {
  const auto it = factor_.find(gpu);
  return it == factor_.end() ? 1.0 : it->second;
}

int SlowState::dropped(const ClusterState& state, std::int64_t first, std::int64_t count) const {
  int n = 0;
  for (auto it = factor_.lower_bound(first); it != factor_.end() && it->first < first + count;
       ++it) {
    if (it->second < drop_below_ && !state.is_failed(it->first)) ++n;
  }
  return n;
}

double SlowState::rebalanced(int degree, const std::vector<double>& slow) const {
  auto key = std::make_pair(degree, slow);
  auto it = rebalanced_.find(key);
  if (it == rebalanced_.end()) {
    it = rebalanced_.emplace(std::move(key), workload_.rebalanced_speed(degree, slow)).first;
  }
  return it->second;
}

SlowState::ByReplica SlowState::by_replica(const ClusterState& state) const {
  ByReplica by;
  for (const auto& [gpu, factor] : factor_) {
    if (state.is_failed(gpu)) continue;
    const std::int64_t group = gpu / tp_;
    by[group / pp_][group].push_back(factor);
  }
  return by;
}

PolicyRates SlowState::adjust(const ClusterState& state, const PolicySpec& policy,
                              const PolicyRates& base) const {
  if (factor_.empty()) return base;
  return is_ntp(policy.kind) ? adjust_ntp(state, policy, base)
                             : adjust_uniform(state, policy, base);
}

SlowState::Stage SlowState::ntp_stage(const ClusterState& state, const PolicySpec& policy,
                                      int failed, std::vector<double> slow) const {
  const bool pw = boosts_power(policy.kind);
  std::sort(slow.begin(), slow.end());
  if (policy.slow == SlowMitigation::kDrop) {
    const auto kept =
        std::find_if(slow.begin(), slow.end(), [&](double f) { return f >= drop_below_; });
    failed += static_cast<int>(kept - slow.begin());
    slow.erase(slow.begin(), kept);
  }
  Stage s;
  s.degree = state.degree_for(failed);
  if (s.degree == 0) return s;
  // degree_multiple rounding idles healthy GPUs: the slowest ones.
  const int idle = std::min<int>(tp_ - failed - s.degree, static_cast<int>(slow.size()));
  slow.erase(slow.begin(), slow.begin() + idle);
  s.power_factor = pw ? state.pw_factor(failed) : 1.0;
  if (slow.empty()) {
    s.speed = state.stage_speed(failed, pw);
    return s;
  }
  const bool rebalance =
      policy.slow == SlowMitigation::kRebalance || policy.slow == SlowMitigation::kBoost;
  const double factor = rebalance ? rebalanced(s.degree, slow) : slow.front();
  if (policy.slow == SlowMitigation::kBoost) {
    const power::BoostPlan plan = power::plan_boost(
        model_, state.stage_speed(failed, false) * factor, {s.degree, tdp_watts_, headroom_});
    s.speed = plan.speed;
    s.power_factor = plan.power_factor;
  } else {
    s.speed = state.stage_speed(failed, pw) * factor;
  }
  return s;
}

PolicyRates SlowState::adjust_ntp(const ClusterState& state, const PolicySpec& policy,
                                  const PolicyRates& base) const {
  const ByReplica by = by_replica(state);
  if (by.empty()) return base;
  const bool pw = boosts_power(policy.kind);
  const bool unmitigated = policy.slow == SlowMitigation::kUnmitigated;
  double speed_delta = 0, min_ratio = 1, active_delta = 0, power_delta = 0;
  int min_degree = state.min_running_degree();
  for (const auto& [r, groups] : by) {
    double before = 1, after = 1, degrees_before = 0, degrees_after = 0, power_before = 0,
           power_after = 0;
    for (std::int64_t g = r * pp_; g < (r + 1) * pp_; ++g) {
      const int failed = state.group_failed(g);
      const auto it = groups.find(g);
      const Stage b = ntp_stage(state, policy, failed, {});
      const Stage a = it == groups.end() ? b : ntp_stage(state, policy, failed, it->second);
      before = std::min(before, b.speed);
      after = std::min(after, a.speed);
      degrees_before += b.degree;
      degrees_after += a.degree;
      power_before += b.degree * b.power_factor;
      power_after += a.degree * a.power_factor;
      if (a.degree > 0) min_degree = std::min(min_degree, a.degree);
    }
    if (unmitigated) {
      if (before > 0) min_ratio = std::min(min_ratio, after / before);
      continue;
    }
    speed_delta += after - before;
    // A replica with a stage that cannot run has no active GPUs (ClusterState's rule).
    const double active_before = before > 0 ? degrees_before : 0.0;
    const double active_after = after > 0 ? degrees_after : 0.0;
    active_delta += active_after - active_before;
    power_delta += pw ? (after > 0 ? power_after : 0.0) - (before > 0 ? power_before : 0.0)
                      : active_after - active_before;
  }
  PolicyRates r = base;
  if (unmitigated) {
    r.capacity = base.capacity * min_ratio;
    return r;
  }
  r.capacity = state.dp_factor(min_degree) * (state.speed_sum(pw) + speed_delta);
  r.active_gpus += active_delta;
  r.power_units += power_delta;
  return r;
}

PolicyRates SlowState::adjust_uniform(const ClusterState& state, const PolicySpec& policy,
                                      const PolicyRates& base) const {
  const ByReplica by = by_replica(state);
  if (by.empty()) return base;
  const bool ckpt = policy.kind == PolicyKind::kCkptRestart;
  const bool drop = policy.slow == SlowMitigation::kDrop;
  double speed_delta = 0, min_ratio = 1;
  std::vector<std::int64_t> dropped;  // per dropped replica: its groups with a dropped GPU
  for (const auto& [r, groups] : by) {
    // CKPT-RESTART runs on replacement hardware: every replica, failed GPUs swapped out. DP-DROP
    // and SPARES: replicas with a failed group are out (or on spares, taken as unslowed).
    if (!ckpt && state.replica_bad(r) > 0) continue;
    double speed = 1;
    std::int64_t dropped_groups = 0;
    for (const auto& [g, factors] : groups) {
      bool any_dropped = false;
      for (double f : factors) {
        if (drop && f < drop_below_) {
          any_dropped = true;
        } else {
          speed = std::min(speed, f);
        }
      }
      dropped_groups += any_dropped ? 1 : 0;
    }
    if (dropped_groups > 0 && !ckpt) {
      dropped.push_back(dropped_groups);
      continue;
    }
    if (policy.slow == SlowMitigation::kUnmitigated) {
      min_ratio = std::min(min_ratio, speed);
    } else {
      speed_delta += speed - 1.0;
    }
  }
  // Dropped replicas stop like failed ones; SPARES(n) swaps spare groups in for their dropped
  // groups while any are left after the failed replicas took theirs (fewest groups first).
  std::int64_t left =
      policy.kind == PolicyKind::kSpares
          ? state.spare_groups_left(static_cast<std::int64_t>(policy.spares) * groups_per_domain_)
          : 0;
  std::sort(dropped.begin(), dropped.end());
  double stopped = 0;
  for (std::int64_t k : dropped) {
    if (left >= k) {
      left -= k;
    } else {
      stopped += 1;
    }
  }
  PolicyRates r = base;
  if (policy.slow == SlowMitigation::kUnmitigated) {
    r.capacity = base.capacity * min_ratio;
    return r;
  }
  r.capacity = std::max(0.0, base.capacity + speed_delta - stopped);
  if (!ckpt) {
    r.active_gpus -= stopped * tp_ * pp_;
    r.power_units -= stopped * tp_ * pp_;
  }
  return r;
}

}  // namespace ntp::sim
