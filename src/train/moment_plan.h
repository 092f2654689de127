// The transfer list of a ZeRO-1 moment reshard (train/moment_reshard.h), computed from every
// member's description of what it holds and needs.
//
// Every needed block takes its units from, in this order: the member itself (what it owned, then
// its copies), the other members' owned blocks in world-rank order, then their copies. A source
// contributes the units it holds that no earlier source gave.
//
// Cost: each need looks only at the holdings whose units overlap it (an index per parameter,
// sorted by first unit), so the plan takes O(H log H + sum over needs of the overlapping
// holdings) for H holdings. Each unit of a ZeRO-1 job has one owner and one copy, so a need
// overlaps a few holdings, where a scan of every holding of the parameter made the plan
// quadratic in the job's members.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"
#include "shard/interval_set.h"

namespace ntp::train {

// One block of a member's description.
struct MomentItem {
  enum Kind : std::int64_t { kOwned = 0, kCopy = 1, kNeeded = 2 };
  std::int64_t kind = kOwned;
  int chunk = 0, block = 0, param = 0;
  shard::IntervalSet units;
};

struct MomentTransfer {
  int source = 0, destination = 0;  // world ranks
  int source_chunk = 0;             // index into the source's owned chunks, then its copies
  int source_block = 0, destination_chunk = 0, destination_block = 0;
  int param = 0;
  shard::IntervalSet units;
  friend bool operator==(const MomentTransfer&, const MomentTransfer&) = default;
};

// items[r]: world rank r's description; params in [0, names.size()). The transfers in
// destination order (rank, then the order of its needs). kNotFound naming the parameter and
// units when a needed unit is held by no member; kInvalidArgument for a parameter out of range.
Result<std::vector<MomentTransfer>> plan_moment_transfers(
    const std::vector<std::vector<MomentItem>>& items, const std::vector<std::string>& names);

}  // namespace ntp::train
