#include "sim/cluster_state.h"

#include <algorithm>

namespace ntp::sim {

ClusterState::ClusterState(const SimConfig& config, const Workload& workload,
                           const power::PowerModel& model)
    : tp_(config.parallel.tp),
      pp_(config.parallel.pp),
      groups_per_domain_(config.parallel.domain_size / config.parallel.tp),
      replicas_(config.replicas()),
      gpus_(config.system.gpus) {
  degree_.resize(tp_ + 1);
  ntp_speed_.resize(tp_ + 1);
  pw_speed_.resize(tp_ + 1);
  pw_factor_.resize(tp_ + 1);
  for (int f = 0; f <= tp_; ++f) {
    const int d = workload.degree_after_failures(f);
    degree_[f] = d;
    ntp_speed_[f] = d > 0 ? workload.speed(d) : 0.0;
    if (d > 0) {
      const power::BoostPlan plan = power::plan_boost(
          model, ntp_speed_[f], {d, config.system.tdp_watts, config.power.headroom});
      pw_speed_[f] = plan.speed;
      pw_factor_[f] = plan.power_factor;
    }
  }
  dp_factor_.resize(tp_ + 1);
  for (int t = 1; t <= tp_; ++t) dp_factor_[t] = workload.dp_factor(t);

  gpu_failed_.assign(static_cast<std::size_t>(gpus_), 0);
  group_failed_.assign(static_cast<std::size_t>(replicas_ * pp_), 0);
  degree_hist_.assign(tp_ + 1, 0);
  degree_hist_[tp_] = replicas_ * pp_;
  replica_hist_.assign(pp_ + 1, 0);
  replica_hist_[0] = replicas_;
  rep_.assign(static_cast<std::size_t>(replicas_), Replica{});
  for (auto& r : rep_) {
    r.ntp_active = static_cast<double>(tp_) * pp_;
    r.pw_power = r.ntp_active;
  }
  sum_ntp_ = sum_pw_ = static_cast<double>(replicas_);
  sum_ntp_active_ = sum_pw_power_ = static_cast<double>(gpus_);
}

int ClusterState::fail(std::int64_t first, int count) {
  NTP_CHECK(first >= 0 && first + count <= gpus_);
  changes_.clear();
  int changed = 0;
  for (std::int64_t g = first; g < first + count; ++g) {
    if (gpu_failed_[g]) continue;
    gpu_failed_[g] = 1;
    ++changed;
    const std::int64_t group = g / tp_;
    update_group(group, group_failed_[group] + 1);
  }
  failed_gpus_ += changed;
  return changed;
}

int ClusterState::repair(std::int64_t first, int count) {
  NTP_CHECK(first >= 0 && first + count <= gpus_);
  changes_.clear();
  int changed = 0;
  for (std::int64_t g = first; g < first + count; ++g) {
    if (!gpu_failed_[g]) continue;
    gpu_failed_[g] = 0;
    ++changed;
    const std::int64_t group = g / tp_;
    update_group(group, group_failed_[group] - 1);
  }
  failed_gpus_ -= changed;
  return changed;
}

void ClusterState::update_group(std::int64_t group, int new_failed) {
  const int old_failed = group_failed_[group];
  auto it = std::find_if(changes_.begin(), changes_.end(),
                         [&](const DegreeChange& c) { return c.group == group; });
  if (it == changes_.end()) {
    changes_.push_back({group, degree_[old_failed], degree_[new_failed]});
  } else {
    it->to = degree_[new_failed];
  }
  --degree_hist_[degree_[old_failed]];
  ++degree_hist_[degree_[new_failed]];
  group_failed_[group] = static_cast<std::int16_t>(new_failed);
  recompute_replica(group / pp_);
}

void ClusterState::recompute_replica(std::int64_t replica) {
  Replica& r = rep_[replica];
  // Remove the old contribution.
  --replica_hist_[r.bad];
  if (r.bad > 0) --failed_replicas_;
  sum_bad_ -= r.bad;
  sum_ntp_ -= r.ntp;
  sum_pw_ -= r.pw;
  sum_ntp_need_ -= std::min<double>(r.bad, pp_ * (1.0 - r.ntp));
  sum_pw_need_ -= std::min<double>(r.bad, pp_ * (1.0 - r.pw));
  sum_ntp_active_ -= r.ntp_active;
  sum_pw_power_ -= r.pw_power;

  Replica n;
  n.ntp = n.pw = 1.0;
  double degrees = 0, powered = 0;
  for (std::int64_t g = replica * pp_; g < (replica + 1) * pp_; ++g) {
    const int f = group_failed_[g];
    if (f > 0) ++n.bad;
    n.ntp = std::min(n.ntp, ntp_speed_[f]);
    n.pw = std::min(n.pw, pw_speed_[f]);
    degrees += degree_[f];
    powered += degree_[f] * (f > 0 ? pw_factor_[f] : 1.0);
  }
  // A pipeline runs at its slowest stage; a stage that cannot run stops the replica.
  n.ntp_active = n.ntp > 0 ? degrees : 0.0;
  n.pw_power = n.pw > 0 ? powered : 0.0;
  r = n;

  ++replica_hist_[r.bad];
  if (r.bad > 0) ++failed_replicas_;
  sum_bad_ += r.bad;
  sum_ntp_ += r.ntp;
  sum_pw_ += r.pw;
  sum_ntp_need_ += std::min<double>(r.bad, pp_ * (1.0 - r.ntp));
  sum_pw_need_ += std::min<double>(r.bad, pp_ * (1.0 - r.pw));
  sum_ntp_active_ += r.ntp_active;
  sum_pw_power_ += r.pw_power;
}

int ClusterState::min_running_degree() const {
  for (int t = 1; t <= tp_; ++t) {
    if (degree_hist_[t] > 0) return t;
  }
  return tp_;
}

int ClusterState::min_degree_of_others(const std::vector<DegreeChange>& changes) const {
  std::vector<std::int64_t> hist = degree_hist_;
  for (const DegreeChange& c : changes) --hist[c.to];
  for (int t = 1; t <= tp_; ++t) {
    if (hist[t] > 0) return t;
  }
  return tp_;
}

std::int64_t ClusterState::restored_by_spares(std::int64_t spare_groups, std::int64_t* left) const {
  std::int64_t restored = 0;
  for (int k = 1; k <= pp_ && spare_groups >= k; ++k) {
    const std::int64_t take = std::min(replica_hist_[k], spare_groups / k);
    restored += take;
    spare_groups -= take * k;
  }
  if (left != nullptr) *left = spare_groups;
  return restored;
}

std::int64_t ClusterState::spare_groups_left(std::int64_t spare_groups) const {
  std::int64_t left = 0;
  restored_by_spares(spare_groups, &left);
  return left;
}

PolicyRates ClusterState::rates(const PolicySpec& policy) const {
  PolicyRates r;
  const double full_replica_gpus = static_cast<double>(tp_) * pp_;
  switch (policy.kind) {
    case PolicyKind::kDpDrop:
    case PolicyKind::kSpares: {
      std::int64_t running = replicas_ - failed_replicas_;
      if (policy.kind == PolicyKind::kSpares) {
        running +=
            restored_by_spares(static_cast<std::int64_t>(policy.spares) * groups_per_domain_);
      }
      r.capacity = static_cast<double>(running);
      r.need_groups = static_cast<double>(sum_bad_);
      r.active_gpus = r.capacity * full_replica_gpus;
      r.power_units = r.active_gpus;
      break;
    }
    case PolicyKind::kCkptRestart:
      // Restarts on replacement hardware: full capacity whenever it is up.
      r.capacity = static_cast<double>(replicas_);
      r.need_groups = static_cast<double>(sum_bad_);
      r.active_gpus = static_cast<double>(gpus_);
      r.power_units = r.active_gpus;
      break;
    case PolicyKind::kNtp:
    case PolicyKind::kNtpLive:
    case PolicyKind::kNtpPwLive:
    case PolicyKind::kNtpPw: {
      const double g = dp_factor_[min_running_degree()];
      const bool pw = boosts_power(policy.kind);
      const double sum = pw ? sum_pw_ : sum_ntp_;
      r.capacity = g * sum;
      r.need_groups = (pw ? sum_pw_need_ : sum_ntp_need_) + pp_ * sum * (1.0 - g);
      r.active_gpus = sum_ntp_active_;
      r.power_units = pw ? sum_pw_power_ : sum_ntp_active_;
      break;
    }
  }
  return r;
}

}  // namespace ntp::sim
