#include "shard/native_sync_strategy.h"

#include "core/check.h"
#include "shard/balance.h"
#include "shard/degree_plan.h"

namespace ntp::shard {
namespace {

// Folds, DP costs and representatives of one replica over any units: partition P_p of the full
// degree is represented by the rank holding most of it (ties: the lower rank), the others fold
// their pieces of it into that rank.
DegreePlan native_sync_of(RankUnits units, int full, const std::vector<UnitSpace>& spaces,
                          const ByteCosts& bytes) {
  NTP_CHECK(units.size() == spaces.size());
  DegreePlan plan;
  const int degree = spaces.empty() ? 1 : static_cast<int>(units[0].size());
  NTP_CHECK(degree <= full);
  plan.costs.resize(static_cast<std::size_t>(degree));
  plan.units = std::move(units);
  for (std::size_t sp = 0; sp < spaces.size(); ++sp) {
    const std::int64_t units_in_space = spaces[sp].units;
    const std::int64_t unit_bytes = spaces[sp].params_per_unit * bytes.grad_bytes;
    const std::vector<IntervalSet>& per_rank = plan.units[sp];
    NTP_CHECK(per_rank.size() == static_cast<std::size_t>(degree));
    std::vector<int> representative;
    for (int p = 0; p < full; ++p) {
      const IntervalSet partition = IntervalSet::range(
          balanced_offset(units_in_space, full, p), balanced_offset(units_in_space, full, p + 1));
      if (partition.empty()) {  // fewer units than the full degree
        representative.push_back(-1);
        continue;
      }
      // The rank holding most of the partition represents it (ties: the lower rank).
      int best = 0;
      std::int64_t best_overlap = -1;
      for (int k = 0; k < degree; ++k) {
        const std::int64_t overlap =
            intersection_count(per_rank[static_cast<std::size_t>(k)], partition);
        if (overlap > best_overlap) {
          best = k;
          best_overlap = overlap;
        }
      }
      representative.push_back(best);
      plan.costs[static_cast<std::size_t>(best)].dp_bytes += partition.count() * unit_bytes;
      for (int k = 0; k < degree; ++k) {
        if (k == best) continue;
        plan.add_fold(static_cast<int>(sp), k, best,
                      intersect(per_rank[static_cast<std::size_t>(k)], partition), unit_bytes);
      }
    }
    plan.representative.push_back(std::move(representative));
  }
  return plan;
}

}  // namespace

std::vector<IntervalSet> NativeSyncStrategy::layout(std::int64_t units, int degree,
                                                    int partitions) const {
  NTP_CHECK(degree <= partitions);
  std::vector<IntervalSet> per_rank;
  for (int k = 0; k < degree; ++k) {
    per_rank.push_back(IntervalSet::range(balanced_offset(units, degree, k),
                                          balanced_offset(units, degree, k + 1)));
  }
  return per_rank;
}

DegreePlan NativeSyncStrategy::sync_over(RankUnits units, int partitions,
                                         const std::vector<UnitSpace>& spaces,
                                         const ByteCosts& bytes) const {
  return native_sync_of(std::move(units), partitions, spaces, bytes);
}

}  // namespace ntp::shard
