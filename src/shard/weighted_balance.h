// Speed-weighted splitting of whole units over ranks: the arithmetic of slowed replicas
// (DESIGN.md 2.5).
//
// Rank i computes at relative speed s_i > 0 (throughput; only ratios matter), so owning c_i units
// costs it c_i / s_i, and the replica's step waits for the slowest: the split minimizes
// max_i c_i / s_i subject to sum_i c_i = units and c_i >= 1. Every rank keeps at least one unit of
// every space: that is the contract validate_cluster_spec already states (units >= degree, "every
// rank needs at least one unit"), and a rank with nothing to compute would still sit in every TP
// collective of the step, so a rank too slow to be worth one unit is treated as failed instead
// (train/speed_estimator.h reports it). The model itself would run an empty space on a rank
// (tests/model/tp_parity_test.cpp, lopsided2_empty_shards); the rule is the algebra's choice.
//
// The split is the greedy "next unit to the rank that would finish it first": give every rank its
// one unit, then repeatedly hand a unit to the rank with the smallest (c_i + 1) / s_i, ties to the
// rank that comes first in `priority`. That takes the `units` smallest values of the multiset
// {k / s_i : k >= 1} (each rank's k = 1 forced), which is optimal: any split with a smaller
// maximum would have to use fewer of those values. With equal speeds the greedy deals round-robin
// in priority order, so the default priority (rank order) gives balanced_count() exactly.
#pragma once

#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace ntp::shard {

// kInvalidArgument unless every speed is finite and > 0; the message names `what` (e.g. "speed of
// slot 2:3"), the bad value and the fix.
Status validate_speed(double speed, std::string_view what);

// Units of each rank: counts[i] for speeds[i]. `priority` is empty (rank order) or a permutation
// of 0..n-1 whose earlier entries win ties. kInvalidArgument when speeds is empty, a speed is not
// finite and > 0, units < speeds.size() (every rank needs one unit) or priority is no
// permutation. Cost: O(n^2) for n ranks, independent of `units`.
Result<std::vector<std::int64_t>> weighted_counts(std::int64_t units,
                                                  std::span<const double> speeds,
                                                  std::span<const int> priority = {});

// max_i counts[i] / speeds[i]: the compute time of the slowest rank, in units per unit speed.
double weighted_bottleneck(std::span<const std::int64_t> counts, std::span<const double> speeds);

// True when every speed equals the first one exactly (then weights change nothing).
bool all_equal(std::span<const double> speeds);

}  // namespace ntp::shard
