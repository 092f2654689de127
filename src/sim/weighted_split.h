// Whole units over ranks of unequal speed: the time of the best split (NTP's REBALANCE).
//
// `units` indivisible units go to `fast` ranks of speed 1 and to one rank per entry of `slow`
// (speeds in (0, 1]); rank i given u_i units takes u_i / speed_i. The best split minimises the
// slowest rank's time T = max_i u_i / speed_i subject to sum_i u_i = units; it is the least T with
// sum_i floor(T speed_i) >= units. With equal speeds it is shard::max_units_per_rank.
#pragma once

#include <cstdint>
#include <vector>

namespace ntp::sim {

// The least time T (in units of a speed-1 rank's time per unit); requires fast + slow.size() > 0.
double weighted_split_time(std::int64_t units, int fast, const std::vector<double>& slow);

}  // namespace ntp::sim
