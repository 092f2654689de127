#include "train/rebalancer.h"

#include "train/worker_role.h"

namespace ntp::train {
namespace {

// [world rank] -> its replica, in the order of active_slots (the world communicator's).
std::vector<int> replica_of_rank(const shard::ClusterLayout& layout) {
  std::vector<int> out;
  for (const shard::SlotRef& s : active_slots(layout)) out.push_back(s.domain);
  return out;
}

}  // namespace

Result<Rebalancer> Rebalancer::create(const shard::ClusterLayout& layout,
                                      const std::vector<ReplicaBatch>& batches,
                                      SpeedEstimatorOptions options, bool drop_too_slow) {
  NTP_ASSIGN_OR_RETURN(SpeedEstimator estimator,
                       SpeedEstimator::create(replica_of_rank(layout), options));
  Rebalancer out(std::move(estimator), layout.spec, drop_too_slow);
  out.relayout(layout, batches);
  return out;
}

Rebalancer::Rebalancer(SpeedEstimator estimator, shard::ClusterSpec spec, bool drop_too_slow)
    : estimator_(std::move(estimator)), spec_(std::move(spec)), drop_too_slow_(drop_too_slow) {}

void Rebalancer::relayout(const shard::ClusterLayout& layout,
                          const std::vector<ReplicaBatch>& batches) {
  spec_ = layout.spec;
  slots_ = active_slots(layout);
  work_.assign(slots_.size(), 0.0);
  for (size_t r = 0; r < slots_.size(); ++r) {
    const shard::ReplicaLayout& replica = layout.replicas[static_cast<size_t>(slots_[r].domain)];
    size_t k = 0;
    while (replica.slots[k] != slots_[r].slot) ++k;
    double params = 0.0;
    for (size_t sp = 0; sp < layout.spec.spaces.size(); ++sp) {
      params += static_cast<double>(replica.units[sp][k].count()) *
                static_cast<double>(layout.spec.spaces[sp].params_per_unit);
    }
    const auto samples =
        static_cast<double>(batches[static_cast<size_t>(slots_[r].domain)].samples);
    work_[r] = params * samples;
  }
}

Result<std::optional<RebalanceTarget>> Rebalancer::observe(
    const std::vector<double>& compute_seconds) {
  NTP_ASSIGN_OR_RETURN(SpeedVerdict verdict, estimator_.observe(compute_seconds, work_));
  RebalanceTarget target;
  target.raw_speeds = verdict.raw_speeds;
  target.saved_s = verdict.saved_seconds;
  target.reform_cost_s = estimator_.reform_cost();
  if (drop_too_slow_ && !verdict.too_slow.empty()) {
    for (int r : verdict.too_slow) {
      const shard::SlotRef s = slots_[static_cast<size_t>(r)];
      target.drop.push_back(s.domain * spec_.domain_size + s.slot);
    }
    return std::optional<RebalanceTarget>(std::move(target));
  }
  if (verdict.proposal == SpeedProposal::kNone) return std::optional<RebalanceTarget>();
  if (verdict.proposal == SpeedProposal::kRebalance) {  // else kEqualize: no speeds
    target.speeds.assign(static_cast<size_t>(spec_.domains),
                         std::vector<double>(static_cast<size_t>(spec_.domain_size), 1.0));
    for (size_t r = 0; r < slots_.size(); ++r) {
      target.speeds[static_cast<size_t>(slots_[r].domain)][static_cast<size_t>(slots_[r].slot)] =
          verdict.speeds[r];
    }
  }
  return std::optional<RebalanceTarget>(std::move(target));
}

}  // namespace ntp::train
