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
  const std::vector<IntervalSet> extra =
      deal_in_order(tails, std::span(count).subspan(static_cast<std::size_t>(sync_degree)));
  for (int k = sync_degree; k < degree; ++k) {
    out[static_cast<std::size_t>(k)] = extra[static_cast<std::size_t>(k - sync_degree)];
  }
  return out;
}

namespace {

// Folds, DP costs and representatives of one replica over any units: core rank r < s represents
// partition P_r, and every other rank holding units of P_r folds them into r. Over fold_layout's
// units only extra ranks hold units outside their own partition, so this gives exactly the folds
// of the core/extra scheme, in the same order; over speed-weighted units a core rank may hold
// (and fold) units of other partitions too.
DegreePlan fold_sync_of(RankUnits units, int sync_degree, const std::vector<UnitSpace>& spaces,
                        const ByteCosts& bytes) {
  NTP_CHECK(units.size() == spaces.size());
  DegreePlan plan;
  const int degree = spaces.empty() ? sync_degree : static_cast<int>(units[0].size());
  NTP_CHECK(degree >= sync_degree);
  plan.costs.resize(static_cast<std::size_t>(degree));
  plan.units = std::move(units);
  for (std::size_t sp = 0; sp < spaces.size(); ++sp) {
    const UnitSpace& space = spaces[sp];
    const std::int64_t unit_bytes = space.params_per_unit * bytes.grad_bytes;
    NTP_CHECK(plan.units[sp].size() == static_cast<std::size_t>(degree));
    std::vector<int> representative(static_cast<std::size_t>(sync_degree));
    for (int r = 0; r < sync_degree; ++r) {
      representative[static_cast<std::size_t>(r)] = r;  // core rank r reduces partition r
      plan.costs[static_cast<std::size_t>(r)].dp_bytes +=
          balanced_count(space.units, sync_degree, r) * unit_bytes;
    }
    plan.representative.push_back(std::move(representative));
    for (int k = 0; k < degree; ++k) {
      for (int r = 0; r < sync_degree; ++r) {
        if (r == k) continue;
        plan.add_fold(static_cast<int>(sp), k, r,
                      intersect(plan.units[sp][static_cast<std::size_t>(k)],
                                sync_partition(space.units, sync_degree, r)),
                      unit_bytes);
      }
    }
  }
  return plan;
}

}  // namespace

int FoldSyncStrategy::partitions(const std::vector<int>& degrees) const {
  return *std::min_element(degrees.begin(), degrees.end());
}

std::vector<IntervalSet> FoldSyncStrategy::layout(std::int64_t units, int degree,
                                                  int partitions) const {
  return fold_layout(units, degree, partitions);
}

DegreePlan FoldSyncStrategy::sync_over(RankUnits units, int partitions,
                                       const std::vector<UnitSpace>& spaces,
                                       const ByteCosts& bytes) const {
  return fold_sync_of(std::move(units), partitions, spaces, bytes);
}

}  // namespace ntp::shard
