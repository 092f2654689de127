#include "shard/degree_plan.h"

#include <map>

#include "core/check.h"
#include "shard/balance.h"

namespace ntp::shard {

void DegreePlan::add_fold(int space, int from, int to, IntervalSet units_moved,
                          std::int64_t unit_bytes) {
  if (units_moved.empty()) return;
  const std::int64_t b = units_moved.count() * unit_bytes;
  costs[static_cast<std::size_t>(from)].fold_out_bytes += b;
  costs[static_cast<std::size_t>(to)].fold_in_bytes += b;
  folds.push_back({space, 0, from, to, std::move(units_moved)});
}

namespace {

// The job's plan from one DegreePlan per domain (plans may be shared by domains).
StrategyPlan assemble(std::string_view strategy, int partitions,
                      const std::vector<const DegreePlan*>& plan_of,
                      const std::vector<UnitSpace>& spaces) {
  NTP_CHECK(!plan_of.empty() && partitions >= 1);
  StrategyPlan out;
  out.sync.strategy = std::string(strategy);
  out.sync.sync_degree = partitions;
  const int domains = static_cast<int>(plan_of.size());
  for (int d = 0; d < domains; ++d) {
    const DegreePlan& p = *plan_of[static_cast<std::size_t>(d)];
    out.units.push_back(p.units);
    for (FoldTransfer f : p.folds) {
      f.domain = d;
      out.sync.folds.push_back(std::move(f));
    }
    out.sync.costs.push_back(p.costs);
  }
  for (std::size_t sp = 0; sp < spaces.size(); ++sp) {
    const std::int64_t units = spaces[sp].units;
    for (int p = 0; p < partitions; ++p) {
      DpGroup group{static_cast<int>(sp),
                    p,
                    IntervalSet::range(balanced_offset(units, partitions, p),
                                       balanced_offset(units, partitions, p + 1)),
                    {}};
      if (group.units.empty()) continue;
      group.members.reserve(static_cast<std::size_t>(domains));
      for (int d = 0; d < domains; ++d) {
        const int rank =
            plan_of[static_cast<std::size_t>(d)]->representative[sp][static_cast<std::size_t>(p)];
        NTP_CHECK(rank >= 0);
        group.members.push_back({d, rank});
      }
      out.sync.groups.push_back(std::move(group));
    }
  }
  return out;
}

}  // namespace

StrategyPlan assemble_strategy_plan(std::string_view strategy, int partitions,
                                    const std::vector<int>& degrees,
                                    const std::vector<UnitSpace>& spaces,
                                    const std::function<DegreePlan(int degree)>& plan_degree) {
  NTP_CHECK(!degrees.empty() && partitions >= 1);
  std::map<int, DegreePlan> by_degree;  // replicas of equal degree share one plan
  for (int t : degrees) {
    if (!by_degree.contains(t)) by_degree.emplace(t, plan_degree(t));
  }
  std::vector<const DegreePlan*> plan_of;
  plan_of.reserve(degrees.size());
  for (int t : degrees) plan_of.push_back(&by_degree.at(t));
  return assemble(strategy, partitions, plan_of, spaces);
}

StrategyPlan assemble_strategy_plan_for_units(
    std::string_view strategy, int partitions, std::vector<RankUnits> units,
    const std::vector<UnitSpace>& spaces,
    const std::function<DegreePlan(int domain, RankUnits units)>& plan_replica) {
  NTP_CHECK(!units.empty() && partitions >= 1);
  std::vector<DegreePlan> plans;
  plans.reserve(units.size());
  for (std::size_t d = 0; d < units.size(); ++d) {
    plans.push_back(plan_replica(static_cast<int>(d), std::move(units[d])));
  }
  std::vector<const DegreePlan*> plan_of;
  plan_of.reserve(plans.size());
  for (const DegreePlan& p : plans) plan_of.push_back(&p);
  return assemble(strategy, partitions, plan_of, spaces);
}

StrategyPlan SyncStrategy::plan(const std::vector<int>& degrees,
                                const std::vector<UnitSpace>& spaces,
                                const ByteCosts& bytes) const {
  NTP_CHECK(!degrees.empty());
  const int parts = partitions(degrees);
  auto plan_degree = [&](int degree) {
    RankUnits units;
    for (const UnitSpace& space : spaces) {
      units.push_back(space.derived() ? std::vector<IntervalSet>(static_cast<std::size_t>(degree))
                                      : layout(space.units, degree, parts));
    }
    derive_units(units, spaces);
    return sync_over(std::move(units), parts, spaces, bytes);
  };
  return assemble_strategy_plan(name(), parts, degrees, spaces, plan_degree);
}

StrategyPlan SyncStrategy::plan_units(const std::vector<int>& degrees, std::vector<RankUnits> units,
                                      const std::vector<UnitSpace>& spaces,
                                      const ByteCosts& bytes) const {
  NTP_CHECK(!degrees.empty() && degrees.size() == units.size());
  const int parts = partitions(degrees);
  return assemble_strategy_plan_for_units(
      name(), parts, std::move(units), spaces,
      [&](int, RankUnits replica) { return sync_over(std::move(replica), parts, spaces, bytes); });
}

}  // namespace ntp::shard
