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

StrategyPlan NativeSyncStrategy::plan(const std::vector<int>& degrees,
                                      const std::vector<UnitSpace>& spaces,
                                      const ByteCosts& bytes) const {
  const int full = full_degree_;
  auto plan_degree = [&](int degree) {
    NTP_CHECK(degree <= full);
    RankUnits units;
    for (const UnitSpace& space : spaces) {
      std::vector<IntervalSet> per_rank;
      for (int k = 0; k < degree && !space.derived(); ++k) {
        per_rank.push_back(IntervalSet::range(balanced_offset(space.units, degree, k),
                                              balanced_offset(space.units, degree, k + 1)));
      }
      per_rank.resize(static_cast<std::size_t>(degree));  // a derived space: filled below
      units.push_back(std::move(per_rank));
    }
    derive_units(units, spaces);
    return native_sync_of(std::move(units), full, spaces, bytes);
  };
  return assemble_strategy_plan(name(), full, degrees, spaces, plan_degree);
}

StrategyPlan NativeSyncStrategy::plan_units(const std::vector<int>& degrees,
                                            std::vector<RankUnits> units,
                                            const std::vector<UnitSpace>& spaces,
                                            const ByteCosts& bytes) const {
  NTP_CHECK(!degrees.empty() && degrees.size() == units.size());
  const int full = full_degree_;
  return assemble_strategy_plan_for_units(
      name(), full, std::move(units), spaces, [&](int, RankUnits replica) {
        return native_sync_of(std::move(replica), full, spaces, bytes);
      });
}

}  // namespace ntp::shard
