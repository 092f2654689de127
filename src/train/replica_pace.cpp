#include "train/replica_pace.h"

#include <algorithm>

#include "shard/balance.h"

namespace ntp::train {
namespace {

// Seconds (in units of parameters at speed 1) of the slowest rank of a healthy replica.
double healthy_time(const shard::ClusterSpec& spec) {
  double t = 0.0;
  for (const shard::UnitSpace& space : spec.spaces) {
    t += static_cast<double>(shard::max_units_per_rank(space.units, spec.domain_size)) *
         static_cast<double>(space.params_per_unit);
  }
  return t;
}

double rank_params(const shard::ClusterSpec& spec, const shard::ReplicaLayout& replica, size_t k) {
  double params = 0.0;
  for (size_t sp = 0; sp < spec.spaces.size(); ++sp) {
    params += static_cast<double>(replica.units[sp][k].count()) *
              static_cast<double>(spec.spaces[sp].params_per_unit);
  }
  return params;
}

double replica_time(const shard::ClusterSpec& spec, const shard::ReplicaLayout& replica) {
  double slowest = 0.0;
  for (size_t k = 0; k < replica.slots.size(); ++k) {
    slowest = std::max(
        slowest, rank_params(spec, replica, k) / spec.speed(replica.domain, replica.slots[k]));
  }
  return slowest;
}

}  // namespace

std::vector<ReplicaPace> plan_replica_paces(const shard::ClusterLayout& layout, BatchPolicy policy,
                                            double power_limit) {
  const power::PowerModel model;
  const double healthy = healthy_time(layout.spec);
  std::vector<ReplicaPace> out;
  for (const shard::ReplicaLayout& replica : layout.replicas) {
    ReplicaPace p;
    if (replica.degree() == 0) {  // the replica left the job: no pace, no samples, no boost
      p.unboosted = 0.0;
      p.boost = power::BoostPlan{
          .power_factor = 1.0, .speed = 0.0, .keeps_pace = false, .batch_share = 0.0};
      out.push_back(p);
      continue;
    }
    p.unboosted = std::min(1.0, healthy / replica_time(layout.spec, replica));
    power::DomainPowerSpec spec;
    spec.surviving_gpus = replica.degree();
    spec.headroom =
        policy == BatchPolicy::kBoost ? std::clamp(power_limit - 1.0, 0.0, spec.headroom) : 0.0;
    p.boost = power::plan_boost(model, p.unboosted, spec);
    out.push_back(p);
  }
  return out;
}

std::vector<double> paces_of(const std::vector<ReplicaPace>& paces) {
  std::vector<double> out;
  for (const ReplicaPace& p : paces) out.push_back(p.pace());
  return out;
}

double held_params(const shard::ClusterLayout& layout, shard::SlotRef slot) {
  const shard::ReplicaLayout& replica = layout.replicas[static_cast<size_t>(slot.domain)];
  for (size_t k = 0; k < replica.slots.size(); ++k) {
    if (replica.slots[k] == slot.slot) return rank_params(layout.spec, replica, k);
  }
  return 0.0;
}

}  // namespace ntp::train
