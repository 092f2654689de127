// Units dealt by measured load: the placement of a space whose units cost unequal work, such as a
// Mixture-of-Experts model's experts (an expert's work is the tokens the router sends it, which
// a trained router spreads unevenly; docs/perf.md, "Nonuniform expert parallelism").
//
// A count-balanced layout gives each rank as many units as the others; with skewed loads the rank
// holding the busiest units sets the replica's step. Dealing by load: the heaviest unit first
// (ties: the lower id), each to the rank that would finish its load soonest, (held load + unit
// load) / speed, ties to the lower rank. Every rank gets at least one unit (the contract of
// shard/weighted_balance.h). The longest-processing-time rule: with equal speeds the busiest
// rank's load is at most the mean plus the heaviest unit's. The deal is a function of the loads
// and the speeds in rank order alone, never of an earlier layout, so that a layout decoded from
// its text (train/layout_codec.h) is the one that was planned; which slot runs which rank is
// left to the slot assignment (shard/cluster_layout.h), which keeps the most bytes in place.
#pragma once

#include <span>
#include <vector>

#include "shard/interval_set.h"

namespace ntp::shard {

// Units 0..loads.size()-1 over speeds.size() ranks (units[rank]). loads[u] >= 0 (finite), speeds
// > 0, loads.size() >= speeds.size() (callers validate: ClusterSpec's rules).
std::vector<IntervalSet> deal_by_load(std::span<const double> loads,
                                      std::span<const double> speeds);

// The load of the busiest rank over the mean rank's, each rank's load over its speed's share:
// max_r (load_r / speed_r) / (sum load / sum speed); 1.0 is perfect balance (0 loads: 1.0).
double load_imbalance(const std::vector<IntervalSet>& units, std::span<const double> loads,
                      std::span<const double> speeds);

}  // namespace ntp::shard
