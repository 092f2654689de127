#include "shard/native_sync_strategy.h"

#include "core/check.h"
#include "shard/balance.h"
#include "shard/degree_plan.h"

namespace ntp::shard {
StrategyPlan NativeSyncStrategy::plan(const std::vector<int>& degrees,
                                      const std::vector<UnitSpace>& spaces,
                                      const ByteCosts& bytes) const {
  const int full = full_degree_;
  auto plan_degree = [&](int degree) {
    NTP_CHECK(degree <= full);
    DegreePlan plan;
    plan.costs.resize(static_cast<std::size_t>(degree));
    for (std::size_t sp = 0; sp < spaces.size(); ++sp) {
      const std::int64_t units = spaces[sp].units;
      const std::int64_t unit_bytes = spaces[sp].params_per_unit * bytes.grad_bytes;
      std::vector<IntervalSet> per_rank;
      for (int k = 0; k < degree; ++k) {
        per_rank.push_back(IntervalSet::range(balanced_offset(units, degree, k),
                                              balanced_offset(units, degree, k + 1)));
      }
      std::vector<int> representative;
      for (int p = 0; p < full; ++p) {
        const IntervalSet partition = IntervalSet::range(balanced_offset(units, full, p),
                                                         balanced_offset(units, full, p + 1));
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
      plan.units.push_back(std::move(per_rank));
      plan.representative.push_back(std::move(representative));
    }
    return plan;
  };
  return assemble_strategy_plan(name(), full, degrees, spaces, plan_degree);
}

}  // namespace ntp::shard
