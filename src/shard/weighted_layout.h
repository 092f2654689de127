// Speed-weighted replica layouts: a strategy's balanced layout with units moved off slow ranks.
//
// Counts come from weighted_counts (shard/weighted_balance.h), ties broken toward the ranks that
// hold more units in `base`, so equal speeds give back base's counts. Each rank keeps the lowest
// min(base_i, count_i) units of its base set (a fold core rank's head of its partition stays a
// head, a native rank's range stays a prefix of itself); the units released by ranks above their
// count are dealt, in increasing unit order, to the ranks below theirs, in rank order. So the
// weighted layout differs from base by exactly sum_i max(0, count_i - base_i) units per space, and
// going back to base moves exactly the same units back. The layout is a function of base and the
// speeds only, never of the layout before it: every process derives it from the membership.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "core/status.h"
#include "shard/replica_layout.h"
#include "shard/unit_space.h"

namespace ntp::shard {

// Rank i of the result owns counts[i] units of a space of `units` units: the lowest
// min(|base[i]|, counts[i]) of base[i], then its share of the rest. Requires
// sum(counts) == units; base[i] are disjoint subsets of 0..units-1 (units no rank holds are dealt
// like released ones).
std::vector<IntervalSet> rebalance_units(const std::vector<IntervalSet>& base,
                                         std::span<const std::int64_t> counts, std::int64_t units);

// The speed-weighted layout of a replica whose TP rank i runs at speeds[i], from its balanced
// layout `base` (units[space][rank]). kInvalidArgument for a bad speed or fewer units than ranks.
Result<RankUnits> weighted_units(const RankUnits& base, std::span<const double> speeds,
                                 const std::vector<UnitSpace>& spaces);

}  // namespace ntp::shard
