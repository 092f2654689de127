#include "shard/native_sync_strategy.h"

#include <algorithm>
#include <map>

#include "core/check.h"
#include "shard/balance.h"

namespace ntp::shard {
namespace {

struct DegreePlan {
  RankUnits units;                       // [space][rank]
  std::vector<FoldTransfer> folds;       // domain left 0
  std::vector<RankSyncCost> costs;       // [rank]
  std::vector<std::vector<int>> owners;  // owners[space][partition]: representative rank
};

DegreePlan plan_degree(int degree, int full_degree, const std::vector<UnitSpace>& spaces,
                       const ByteCosts& bytes) {
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
    std::vector<int> owners;
    for (int p = 0; p < full_degree; ++p) {
      const std::int64_t begin = balanced_offset(units, full_degree, p);
      const std::int64_t end = balanced_offset(units, full_degree, p + 1);
      if (begin == end) {  // fewer units than full_degree: this partition is empty
        owners.push_back(-1);
        continue;
      }
      // Ranks overlapping [begin, end) are consecutive; pick the one holding most of it.
      int best = -1;
      std::int64_t best_overlap = -1;
      for (int k = 0; k < degree; ++k) {
        const std::int64_t overlap = std::min(end, balanced_offset(units, degree, k + 1)) -
                                     std::max(begin, balanced_offset(units, degree, k));
        if (overlap > best_overlap) {
          best = k;
          best_overlap = overlap;
        }
      }
      owners.push_back(best);
      plan.costs[static_cast<std::size_t>(best)].dp_bytes += (end - begin) * unit_bytes;
      const IntervalSet partition = IntervalSet::range(begin, end);
      for (int k = 0; k < degree; ++k) {
        if (k == best) continue;
        IntervalSet piece = intersect(per_rank[static_cast<std::size_t>(k)], partition);
        if (piece.empty()) continue;
        const std::int64_t b = piece.count() * unit_bytes;
        plan.costs[static_cast<std::size_t>(k)].fold_out_bytes += b;
        plan.costs[static_cast<std::size_t>(best)].fold_in_bytes += b;
        plan.folds.push_back({static_cast<int>(sp), 0, k, best, std::move(piece)});
      }
    }
    plan.units.push_back(std::move(per_rank));
    plan.owners.push_back(std::move(owners));
  }
  return plan;
}

}  // namespace

StrategyPlan NativeSyncStrategy::plan(const std::vector<int>& degrees,
                                      const std::vector<UnitSpace>& spaces,
                                      const ByteCosts& bytes) const {
  NTP_CHECK(!degrees.empty());
  std::map<int, DegreePlan> by_degree;  // replicas of equal degree share one plan
  for (int t : degrees) {
    NTP_CHECK(t <= full_degree_);
    if (!by_degree.contains(t)) by_degree.emplace(t, plan_degree(t, full_degree_, spaces, bytes));
  }
  StrategyPlan out;
  out.sync.strategy = std::string(name());
  out.sync.sync_degree = full_degree_;
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
    const std::int64_t units = spaces[sp].units;
    for (int p = 0; p < full_degree_; ++p) {
      DpGroup group{static_cast<int>(sp),
                    p,
                    IntervalSet::range(balanced_offset(units, full_degree_, p),
                                       balanced_offset(units, full_degree_, p + 1)),
                    {}};
      if (group.units.empty()) continue;
      for (int d = 0; d < domains; ++d) {
        const DegreePlan& plan = by_degree.at(degrees[static_cast<std::size_t>(d)]);
        group.members.push_back({d, plan.owners[sp][static_cast<std::size_t>(p)]});
      }
      out.sync.groups.push_back(std::move(group));
    }
  }
  return out;
}

}  // namespace ntp::shard
