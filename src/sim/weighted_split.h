// Whole units over ranks of unequal speed: the time of the best split (NTP's REBALANCE).
//
// Units of one or more unit spaces (heads, FFN units) go to `fast` ranks of speed 1 and to one
// rank per entry of `slow` (speeds in (0, 1]). A unit of space s costs cost_s at speed 1; rank i
// holding u_{s,i} units takes sum_s cost_s u_{s,i} / speed_i, and a TP group's step waits for its
// slowest rank: T = max_i of that. The best split minimises T subject to sum_i u_{s,i} = units_s
// for every space (a rank's heads and FFN units are chosen together, so a rank with one head
// more can take fewer FFN units).
#pragma once

#include <cstdint>
#include <vector>

namespace ntp::sim {

struct UnitSpaceCost {
  std::int64_t units = 0;
  double cost = 1;  // time of one unit at speed 1
};

// One space of unit cost 1: the least T with sum_i floor(T speed_i) >= units, exactly (with equal
// speeds, shard::max_units_per_rank). Requires fast + slow.size() > 0.
double weighted_split_time(std::int64_t units, int fast, const std::vector<double>& slow);

// Several spaces: bisection on T between the continuous bound (total cost / total speed) and the
// sum of the spaces' own best splits; at each T the coarser spaces go unit by unit to the rank
// with the most time left (this places them whenever any placement can) and the finest space
// fills each rank's remainder in whole units. Floor rounding of the finest space makes the result
// at most one of its units' time on the slowest rank (cost_finest / min speed) above the optimum.
double weighted_split_time(const std::vector<UnitSpaceCost>& spaces, int fast,
                           const std::vector<double>& slow);

}  // namespace ntp::sim
