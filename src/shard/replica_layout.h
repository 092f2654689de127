// ReplicaLayout: which device slot of a domain runs which TP rank, and which units each rank owns.
//
// Any assignment of whole units to ranks is a valid TP layout (a column of A and the matching row
// of B stay on one rank); units need not be contiguous. Layouts built by ntp are balanced: in each
// space, rank unit counts differ by at most one.
#pragma once

#include <cstdint>
#include <vector>

#include "shard/interval_set.h"
#include "shard/unit_space.h"

namespace ntp::shard {

// Units of every rank of one replica: units[space][rank].
using RankUnits = std::vector<std::vector<IntervalSet>>;

// A run of units owned by one slot; owner maps list these sorted by interval.
struct OwnedRange {
  Interval units;
  int slot = 0;
};

struct ReplicaLayout {
  int domain = 0;
  std::vector<int> slots;  // slots[rank]: the device slot that runs TP rank `rank`
  RankUnits units;         // units[space][rank]

  int degree() const { return static_cast<int>(slots.size()); }
  // Most units any rank holds in `space`.
  std::int64_t max_units(int space) const;
  // max units / ideal (total units / degree); 1.0 is perfect balance.
  double imbalance(int space) const;
  // Every unit of `space` with the slot that owns it, sorted by unit id.
  std::vector<OwnedRange> owner_map(int space) const;
};

// Rewrites every derived space of `units` (UnitSpace::derived) from its source space: unit g goes
// to the rank holding unit g * source_stride of the source (every strategy's plan, and
// plan_cluster after a speed-weighted re-split, call it).
void derive_units(RankUnits& units, const std::vector<UnitSpace>& spaces);

// Calls fn(piece, owner_slot) for every part of `units` that appears in `owners` (sorted, as from
// owner_map), in increasing unit order.
template <typename Fn>
void for_each_owned_piece(const std::vector<OwnedRange>& owners, const IntervalSet& units, Fn&& fn);

}  // namespace ntp::shard

#include "shard/replica_layout_inl.h"
