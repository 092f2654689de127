// A replica's pace: its speed relative to a healthy replica's, and the power boost that buys
// part of it back (batch policy boost). Every rank computes the same paces from the same layout,
// so every rank splits the batch alike (train/batch_split.h); the leader applies the boosts.
//
// Work model (the rebalancer's, train/rebalancer.h): a rank's step takes the parameters of the
// units it holds (every space's units times their parameters per unit) over its slot's speed
// (ClusterSpec::speeds); a replica takes as long as its slowest rank. A healthy replica has
// domain_size ranks at speed 1 with balanced units. Work that does not shrink with units (norms,
// the embedding's gather) is left out, so a degraded replica's pace is slightly optimistic.
#pragma once

#include <vector>

#include "power/boost_planner.h"
#include "shard/cluster_layout.h"
#include "train/batch_split.h"

namespace ntp::train {

struct ReplicaPace {
  double unboosted = 1.0;  // the replica's pace at 1 x TDP, in (0, 1]
  power::BoostPlan boost;  // power_factor 1 unless the policy is boost and the control can
  double pace() const { return boost.speed; }  // with the boost: what its batch share follows
};

// One per replica of `layout`. power_limit: the largest factor x TDP the device control can set
// (1: it cannot change power, as on CPU); boosts are planned only under BatchPolicy::kBoost, up to
// the rack budget (power::DomainPowerSpec::headroom) or power_limit, whichever is lower.
std::vector<ReplicaPace> plan_replica_paces(const shard::ClusterLayout& layout, BatchPolicy policy,
                                            double power_limit);

std::vector<double> paces_of(const std::vector<ReplicaPace>& paces);

// The parameters of the units `slot` holds in `layout` (every space's units times their
// parameters per unit): the work model's measure of one rank's compute.
double held_params(const shard::ClusterLayout& layout, shard::SlotRef slot);

}  // namespace ntp::train
