// Balanced splitting of whole units over ranks: the arithmetic every layout is built on.
//
// `units` indivisible units (heads, FFN blocks, vocabulary rows) spread over `ranks` ranks so that
// no two ranks differ by more than one unit: the first `units % ranks` ranks get one extra.
#pragma once

#include <cstdint>

namespace ntp::shard {

// Units given to `rank` in the balanced split; requires ranks > 0 and 0 <= rank < ranks.
constexpr std::int64_t balanced_count(std::int64_t units, std::int64_t ranks, std::int64_t rank) {
  return units / ranks + (rank < units % ranks ? 1 : 0);
}

// First unit of `rank` when units are split contiguously in the balanced way.
constexpr std::int64_t balanced_offset(std::int64_t units, std::int64_t ranks, std::int64_t rank) {
  const std::int64_t base = units / ranks, extra = units % ranks;
  return rank * base + (rank < extra ? rank : extra);
}

// The most units any rank holds: ceil(units / ranks). The slowest rank of a TP group does this much
// work, so compute time at degree t scales with max_units_per_rank(units, t), not units / t.
constexpr std::int64_t max_units_per_rank(std::int64_t units, std::int64_t ranks) {
  return (units + ranks - 1) / ranks;
}

// Load imbalance of the balanced split: max units / ideal (units / ranks), >= 1.
constexpr double balance_imbalance(std::int64_t units, std::int64_t ranks) {
  return static_cast<double>(max_units_per_rank(units, ranks)) * static_cast<double>(ranks) /
         static_cast<double>(units);
}

}  // namespace ntp::shard
