// DegreePlan: the part of a sync strategy's plan that is the same for every replica of one degree,
// and the assembly of a whole job's StrategyPlan from those parts.
//
// Strategies differ only in how a replica of degree t lays out its units and which of its ranks
// represents each sync partition; assembling the job (folds per domain, per-rank costs, DP groups
// with one member per replica) is shared here.
#pragma once

#include <functional>
#include <string_view>
#include <vector>

#include "shard/sync_plan.h"

namespace ntp::shard {

struct DegreePlan {
  RankUnits units;                  // [space][rank]
  std::vector<FoldTransfer> folds;  // domain field left 0: set per replica on assembly
  std::vector<RankSyncCost> costs;  // [rank]
  // representative[space][partition]: the rank that joins that partition's DP group after the
  // fold; -1 for an empty partition (fewer units than partitions).
  std::vector<std::vector<int>> representative;

  // Records that rank `from` folds `units` of `space` into rank `to`, and what that costs both.
  void add_fold(int space, int from, int to, IntervalSet units, std::int64_t unit_bytes);
};

// The job's plan: sync partitions are the `partitions` balanced contiguous ranges of every space;
// `plan_degree(t)` is called once per distinct degree t in `degrees` (degrees[d] = replica of
// domain d) and must fill units, folds, costs and representative for `spaces`.
StrategyPlan assemble_strategy_plan(std::string_view strategy, int partitions,
                                    const std::vector<int>& degrees,
                                    const std::vector<UnitSpace>& spaces,
                                    const std::function<DegreePlan(int degree)>& plan_degree);

// The same assembly when every replica's units are given (units[d][space][rank]):
// `plan_replica(d, units)` derives replica d's folds, costs and representatives over them and
// returns them with the units.
StrategyPlan assemble_strategy_plan_for_units(
    std::string_view strategy, int partitions, std::vector<RankUnits> units,
    const std::vector<UnitSpace>& spaces,
    const std::function<DegreePlan(int domain, RankUnits units)>& plan_replica);

}  // namespace ntp::shard
