// Moving a worker's training state from one cluster layout to the next (live recovery).
//
// plan_reshard (shard/reshard_plan.h) says which slot sends which units of each space to which
// slot: from survivors of the same domain first, from DP peers (another replica holds the same
// weights and, with the replicated optimizer, the same moments, bit for bit) for units whose every
// local copy died, split among all the peers that hold them. execute_state_reshard runs that plan
// as one alltoallv over the new world communicator, moving for every moved unit the weights and
// both AdamW moments of every tensor of its space, and copies what stays on a slot from its old
// model into its new one. Replicated tensors (and their moments) go to slots that held nothing
// before (repairs) in shares from every survivor of the nearest domain (replicated_sources).
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "comm/communicator.h"
#include "core/status.h"
#include "model/param.h"
#include "shard/cluster_layout.h"
#include "shard/reshard_plan.h"
#include "train/adamw_optimizer.h"

namespace ntp::train {

// One worker's state in a layout: its parameters and replicated AdamW moments (null with a
// sharded optimizer: then the values alone move, and MomentReshard moves the moments).
struct HeldState {
  std::vector<model::Param>* params = nullptr;
  AdamWOptimizer* adamw = nullptr;
};

struct ReshardStats {
  int64_t bytes_received = 0;  // from other slots (kept units are copied locally)
};

// The moves of a derived space's groups (shard::plan_reshard moves owned units only; a derived
// group is stored by every rank its source units read, WorkerRole::held): each slot of `world`
// (the new layout's active slots) receives what it stores in `to` and did not store in `from`,
// each group from a survivor that stores it, its own domain's first, then the next domains'; in
// that domain, the holder that sends fewest groups so far (ties: the lowest slot), so the groups
// a repair or a returning replica needs come from all their holders, not from the first one.
// Every member computes the same list.
std::vector<shard::ShardTransfer> derived_transfers(const shard::ClusterLayout& from,
                                                    const shard::ClusterLayout& to,
                                                    const std::vector<shard::SlotRef>& world);

// Where `joiner` (a slot of `world` that held nothing in `from`) gets a replicated tensor of
// `rows` rows: from the survivors (slots of `world` active in `from`) of the nearest domain that
// has any, its own first, then the next domains', each a contiguous share of the rows in slot
// order (the first rows % survivors one row more; a survivor with no share is left out). Every
// survivor holds the same bits of a replicated tensor, so the shares add up to any one's copy.
// Empty when no slot survived.
std::vector<std::pair<shard::SlotRef, shard::IntervalSet>> replicated_sources(
    const shard::ClusterLayout& from, const std::vector<shard::SlotRef>& world,
    shard::SlotRef joiner, int64_t rows);

// `from`: the state this worker held in layout `from_layout`, or null (a repair joining with
// nothing). `to`: its freshly built state in `to_layout`. `world` spans the active slots of
// `to_layout` in world-rank order. kUnavailable when a peer fails during the exchange; kNotFound,
// on every member alike and before anything moves, when some unit has no live copy
// (plan_reshard's error).
Result<ReshardStats> execute_state_reshard(const shard::ClusterLayout& from_layout,
                                           const shard::ClusterLayout& to_layout, shard::SlotRef me,
                                           const HeldState* from, HeldState to,
                                           comm::Communicator& world);

}  // namespace ntp::train
