#include "shard/fold_sync_strategy.h"

#include <algorithm>
#include <map>

#include "core/check.h"
#include "shard/balance.h"

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

namespace {

// Layout and folds of one replica of degree `degree`, identical for all replicas of that degree.
struct DegreePlan {
  RankUnits units;                  // [space][rank]
  std::vector<FoldTransfer> folds;  // domain left 0
  std::vector<RankSyncCost> costs;  // [rank]
};

DegreePlan plan_degree(int degree, int sync_degree, const std::vector<UnitSpace>& spaces,
                       const ByteCosts& bytes) {
  DegreePlan plan;
  plan.costs.resize(static_cast<std::size_t>(degree));
  for (std::size_t sp = 0; sp < spaces.size(); ++sp) {
    const UnitSpace& space = spaces[sp];
    const std::int64_t unit_bytes = space.params_per_unit * bytes.grad_bytes;
    plan.units.push_back(fold_layout(space.units, degree, sync_degree));
    const auto& per_rank = plan.units.back();
    for (int r = 0; r < sync_degree; ++r) {
      plan.costs[static_cast<std::size_t>(r)].dp_bytes +=
          balanced_count(space.units, sync_degree, r) * unit_bytes;
    }
    for (int k = sync_degree; k < degree; ++k) {
      for (int r = 0; r < sync_degree; ++r) {
        IntervalSet piece = intersect(per_rank[static_cast<std::size_t>(k)],
                                      sync_partition(space.units, sync_degree, r));
        if (piece.empty()) continue;
        const std::int64_t b = piece.count() * unit_bytes;
        plan.costs[static_cast<std::size_t>(k)].fold_out_bytes += b;
        plan.costs[static_cast<std::size_t>(r)].fold_in_bytes += b;
        plan.folds.push_back({static_cast<int>(sp), 0, k, r, std::move(piece)});
      }
    }
  }
  return plan;
}

}  // namespace

StrategyPlan FoldSyncStrategy::plan(const std::vector<int>& degrees,
                                    const std::vector<UnitSpace>& spaces,
                                    const ByteCosts& bytes) const {
  NTP_CHECK(!degrees.empty());
  const int sync_degree = *std::min_element(degrees.begin(), degrees.end());
  std::map<int, DegreePlan> by_degree;  // replicas of equal degree share one plan
  for (int t : degrees) {
    if (!by_degree.contains(t)) by_degree.emplace(t, plan_degree(t, sync_degree, spaces, bytes));
  }

  StrategyPlan out;
  out.sync.strategy = std::string(name());
  out.sync.sync_degree = sync_degree;
  const int domains = static_cast<int>(degrees.size());
  for (int d = 0; d < domains; ++d) {
    const DegreePlan& p = by_degree.at(degrees[static_cast<std::size_t>(d)]);
    out.units.push_back(p.units);
    for (FoldTransfer f : p.folds) {
      f.domain = d;
      out.sync.folds.push_back(std::move(f));
    }
    out.sync.costs.push_back(p.costs);
  }
  for (std::size_t sp = 0; sp < spaces.size(); ++sp) {
    for (int r = 0; r < sync_degree; ++r) {
      DpGroup group{static_cast<int>(sp), r, sync_partition(spaces[sp].units, sync_degree, r), {}};
      group.members.reserve(static_cast<std::size_t>(domains));
      for (int d = 0; d < domains; ++d) group.members.push_back({d, r});
      out.sync.groups.push_back(std::move(group));
    }
  }
  return out;
}

}  // namespace ntp::shard
