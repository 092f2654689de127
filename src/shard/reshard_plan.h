// ReshardPlan: the transfers that turn one cluster layout into another (after a failure or repair).
//
// Parameters and optimizer state of each unit move from a slot that holds them in the old layout
// and is alive in the new membership. Sources inside the destination's own domain (NVLink) are
// preferred; the units whose every local copy died come from DP peers: split among every other
// domain whose live owner holds them, balanced by the bytes each peer domain sends over the whole
// plan (each peer within one unit of its exact share when all peers hold the same units), so a
// lost slot is refilled by all replicas at once. Deterministic: every member computes the same
// plan from the same layouts.
#pragma once

#include <cstdint>
#include <vector>

#include "core/status.h"
#include "shard/cluster_layout.h"

namespace ntp::shard {

struct ShardTransfer {
  int space = 0;
  SlotRef source;
  SlotRef destination;
  IntervalSet units;
  std::int64_t bytes = 0;  // units x params per unit x state bytes per param
  bool intra_domain() const { return source.domain == destination.domain; }
};

struct ReshardPlan {
  std::vector<ShardTransfer> transfers;  // sorted by (destination, space, source)
  std::int64_t intra_domain_bytes = 0;
  std::int64_t dp_peer_bytes = 0;
  std::int64_t kept_bytes = 0;  // bytes that stay where they are
  std::int64_t max_bytes_into_slot = 0;
};

// Plans the move from `from` to `to` (same domains, domain size and unit spaces). A slot is a valid
// source if it is active in `from` and healthy in `to.spec`. kNotFound if some unit has no live
// copy anywhere (then only a checkpoint can restore it).
Result<ReshardPlan> plan_reshard(const ClusterLayout& from, const ClusterLayout& to);

}  // namespace ntp::shard
