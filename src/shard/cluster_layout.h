// ClusterLayout: every replica's layout plus the DP sync plan, computed from a membership.
#pragma once

#include <vector>

#include "core/status.h"
#include "shard/cluster_spec.h"
#include "shard/replica_layout.h"
#include "shard/sync_plan.h"

namespace ntp::shard {

struct ClusterLayout {
  ClusterSpec spec;
  std::vector<ReplicaLayout> replicas;  // one per domain, in domain order
  SyncPlan sync;
};

// Lays out `spec` with `strategy`. When `previous` is given (the layout before a failure or
// repair), each replica's ranks are mapped to slots so that slots keep as many of the units they
// already hold as possible (greedy on kept bytes), which shrinks the reshard. Without it rank k
// runs on the k-th healthy slot. Deterministic: equal inputs give equal layouts on every process.
//
// A domain whose healthy slots differ in speed (spec.speeds) gets the strategy's balanced layout
// re-split in proportion to the speeds of the slots its ranks run on (shard/weighted_layout.h),
// and the sync plan is derived over those units (SyncStrategy::plan_units). When that domain, or
// the same domain in `previous`, is weighted and its members are unchanged, every rank stays on
// its previous slot, so a rebalance moves only the units whose owner's count changed. Equal
// speeds (or none) give exactly the unweighted layout. The result depends on `previous` only
// through the rank -> slot mapping, never through its units. Derived spaces (UnitSpace::derived)
// follow their source space in every replica, weighted or not (derive_units).
Result<ClusterLayout> plan_cluster(ClusterSpec spec, const SyncStrategy& strategy,
                                   const ClusterLayout* previous = nullptr);

}  // namespace ntp::shard
