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
Result<ClusterLayout> plan_cluster(ClusterSpec spec, const SyncStrategy& strategy,
                                   const ClusterLayout* previous = nullptr);

}  // namespace ntp::shard
