#include "shard/fold_sync_strategy.h"

#include <algorithm>

#include "core/check.h"
#include "shard/balance.h"
#include "shard/degree_plan.h"

namespace ntp::shard {

IntervalSet sync_partition(std::int64_t units, int sync_degree, int index) {
  return IntervalSet::range(balanced_offset(units, sync_degree, index),
                            balanced_offset(units, sync_degree, index + 1));
}

std::vector<IntervalSet> fold_layout(std::int64_t units, int degree, int sync_degree) {
  NTP_CHECK(1 <= sync_degree && sync_degree <= degree && degree <= units);
  const std::int64_t base = units / degree;
  std::int64_t plus_one = units % degree;  // ranks that get base + 1 units
  std::vector<std::int64_t> count(static_cast<std::size_t>(degree), base);
  // +1 counts go first to core ranks whose partition can hold them (fewer units to fold), then to
  // extra ranks. Feasible whenever degree >= sync_degree (see docs/design/layout-algebra.md).
  for (int r = 0; r < sync_degree && plus_one > 0; ++r) {
    if (balanced_count(units, sync_degree, r) >= base + 1) {
      ++count[static_cast<std::size_t>(r)];
      --plus_one;
    }
  }
  for (int k = sync_degree; k < degree && plus_one > 0; ++k) {
    ++count[static_cast<std::size_t>(k)];
    --plus_one;
  }
  NTP_CHECK_MSG(plus_one == 0, "fold_layout could not balance units");

  std::vector<IntervalSet> out(static_cast<std::size_t>(degree));
  IntervalSet tails;
  for (int r = 0; r < sync_degree; ++r) {
    const std::int64_t begin = balanced_offset(units, sync_degree, r);
    const std::int64_t end = balanced_offset(units, sync_degree, r + 1);
    const std::int64_t core_end = begin + count[static_cast<std::size_t>(r)];
    NTP_CHECK(core_end <= end);
    out[static_cast<std::size_t>(r)] = IntervalSet::range(begin, core_end);
    tails.append(core_end, end);
  }
  // Deal the concatenated tails to the extra ranks in order.
  auto tail = tails.intervals().begin();
  std::int64_t cursor = tails.empty() ? 0 : tail->begin;
  for (int k = sync_degree; k < degree; ++k) {
    std::int64_t need = count[static_cast<std::size_t>(k)];
    IntervalSet& mine = out[static_cast<std::size_t>(k)];
    while (need > 0) {
      NTP_CHECK(tail != tails.intervals().end());
      const std::int64_t take = std::min(need, tail->end - cursor);
      mine.append(cursor, cursor + take);
      cursor += take;
      need -= take;
      if (cursor == tail->end && ++tail != tails.intervals().end()) cursor = tail->begin;
    }
  }
  return out;
}

StrategyPlan FoldSyncStrategy::plan(const std::vector<int>& degrees,
                                    const std::vector<UnitSpace>& spaces,
                                    const ByteCosts& bytes) const {
  NTP_CHECK(!degrees.empty());
  const int sync_degree = *std::min_element(degrees.begin(), degrees.end());
  auto plan_degree = [&](int degree) {
    DegreePlan plan;
    plan.costs.resize(static_cast<std::size_t>(degree));
    for (std::size_t sp = 0; sp < spaces.size(); ++sp) {
      const UnitSpace& space = spaces[sp];
      const std::int64_t unit_bytes = space.params_per_unit * bytes.grad_bytes;
      plan.units.push_back(fold_layout(space.units, degree, sync_degree));
      std::vector<int> representative(static_cast<std::size_t>(sync_degree));
      for (int r = 0; r < sync_degree; ++r) {
        representative[static_cast<std::size_t>(r)] = r;  // core rank r reduces partition r
        plan.costs[static_cast<std::size_t>(r)].dp_bytes +=
            balanced_count(space.units, sync_degree, r) * unit_bytes;
      }
      plan.representative.push_back(std::move(representative));
      for (int k = sync_degree; k < degree; ++k) {
        for (int r = 0; r < sync_degree; ++r) {
          plan.add_fold(static_cast<int>(sp), k, r,
                        intersect(plan.units[sp][static_cast<std::size_t>(k)],
                                  sync_partition(space.units, sync_degree, r)),
                        unit_bytes);
        }
      }
    }
    return plan;
  };
  return assemble_strategy_plan(name(), sync_degree, degrees, spaces, plan_degree);
}

}  // namespace ntp::shard
