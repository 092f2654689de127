// Units dealt by measured load (shard/load_layout.h), alone and as plan_cluster places a MoE's
// experts over a replica below its full degree.
#include "shard/load_layout.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>

#include "core/rng.h"
#include "layout_properties.h"
#include "model_shapes.h"
#include "shard/cluster_layout.h"
#include "shard/fold_sync_strategy.h"

namespace ntp::shard {
namespace {

std::vector<double> rank_loads(const std::vector<IntervalSet>& units,
                               const std::vector<double>& loads) {
  std::vector<double> out;
  for (const IntervalSet& set : units) {
    double sum = 0.0;
    for (std::int64_t u : set.ids()) sum += loads[static_cast<std::size_t>(u)];
    out.push_back(sum);
  }
  return out;
}

// Every unit dealt exactly once, every rank holding one at least.
void expect_partition(const std::vector<IntervalSet>& units, std::size_t count) {
  std::vector<int> seen(count, 0);
  for (const IntervalSet& set : units) {
    EXPECT_FALSE(set.ids().empty());
    for (std::int64_t u : set.ids()) ++seen[static_cast<std::size_t>(u)];
  }
  for (std::size_t u = 0; u < count; ++u) EXPECT_EQ(seen[u], 1) << "unit " << u;
}

// The least busiest-rank load over all deals giving each rank one unit at least (brute force).
double best_deal(const std::vector<double>& loads, int ranks) {
  std::vector<int> owner(loads.size(), 0);
  double best = std::numeric_limits<double>::infinity();
  for (;;) {
    std::vector<double> held(static_cast<std::size_t>(ranks), 0.0);
    std::vector<int> count(static_cast<std::size_t>(ranks), 0);
    for (std::size_t u = 0; u < loads.size(); ++u) {
      held[static_cast<std::size_t>(owner[u])] += loads[u];
      ++count[static_cast<std::size_t>(owner[u])];
    }
    if (*std::min_element(count.begin(), count.end()) > 0) {
      best = std::min(best, *std::max_element(held.begin(), held.end()));
    }
    std::size_t i = 0;
    while (i < owner.size() && ++owner[i] == ranks) owner[i++] = 0;
    if (i == owner.size()) return best;
  }
}

TEST(DealByLoadTest, EveryUnitOnceEveryRankOneAndWithinGrahamsBoundOfTheBest) {
  // The longest-processing-time rule at equal speeds: busiest <= (4/3 - 1/(3m)) x the best deal
  // (Graham 1969), and <= the mean plus the heaviest unit. Against brute force at 4-8 units.
  Rng rng(17);
  for (int trial = 0; trial < 200; ++trial) {
    const int ranks = 2 + trial % 3;
    const auto count = static_cast<std::size_t>(ranks + 2 + trial % 4);
    std::vector<double> loads(count);
    for (double& l : loads) l = 1.0 + 99.0 * rng.uniform();
    const std::vector<double> speeds(static_cast<std::size_t>(ranks), 1.0);
    const std::vector<IntervalSet> units = deal_by_load(loads, speeds);
    ASSERT_EQ(units.size(), static_cast<std::size_t>(ranks));
    expect_partition(units, count);
    const std::vector<double> held = rank_loads(units, loads);
    const double busiest = *std::max_element(held.begin(), held.end());
    const double total = std::accumulate(loads.begin(), loads.end(), 0.0);
    const double heaviest = *std::max_element(loads.begin(), loads.end());
    EXPECT_LE(busiest, total / ranks + heaviest) << "trial " << trial;
    const double graham = 4.0 / 3.0 - 1.0 / (3.0 * ranks);
    // (1e-12: the sums above add the same loads in other orders)
    EXPECT_LE(busiest, graham * best_deal(loads, ranks) * (1 + 1e-12)) << "trial " << trial;
    EXPECT_NEAR(load_imbalance(units, loads, speeds), busiest / (total / ranks), 1e-12);
  }
}

TEST(DealByLoadTest, EqualLoadsGiveBalancedCountsAndZeroLoadsStillGiveEveryRankOne) {
  for (double load : {1.0, 0.0}) {
    const std::vector<double> loads(7, load);
    const std::vector<IntervalSet> units = deal_by_load(loads, std::vector<double>(3, 1.0));
    expect_partition(units, loads.size());
    for (const IntervalSet& set : units) {
      // Equal loads: 3/2/2. All zero: every unit ties at 0, the lower rank takes it, until the
      // units left are as many as the ranks without one.
      if (load > 0.0) {
        EXPECT_LE(std::abs(static_cast<double>(set.ids().size()) - 7.0 / 3.0), 1.0);
      }
    }
  }
}

TEST(DealByLoadTest, ASlowRankTakesLoadInProportionToItsSpeed) {
  // 24 experts of loads 1..24 (sum 300) over ranks at speeds 1, 1, 0.5: a rank's finish time is
  // its load over its speed, the ideal 300 / 2.5 = 120 for all, and the heaviest unit over the
  // slowest speed (48) bounds how far the greedy can end from it.
  std::vector<double> loads(24);
  std::iota(loads.begin(), loads.end(), 1.0);
  const std::vector<double> speeds{1.0, 1.0, 0.5};
  const std::vector<IntervalSet> units = deal_by_load(loads, speeds);
  expect_partition(units, loads.size());
  const std::vector<double> held = rank_loads(units, loads);
  for (std::size_t r = 0; r < 3; ++r) EXPECT_LE(held[r] / speeds[r], 120.0 + 48.0) << r;
  EXPECT_LT(held[2], held[0]);
  EXPECT_LT(load_imbalance(units, loads, speeds), 1.1);  // measured 1.0: the deal comes out even
}

// 3 domains of 4 slots, slot 1:2 failed, the MoE shape's spaces, 8 experts.
ClusterSpec moe_cluster() {
  ClusterSpec spec;
  spec.domains = 3;
  spec.domain_size = 4;
  spec.failed = {{1, 2}};
  spec.spaces = model_unit_spaces(ntp::testing::tiny_moe_shape());
  return spec;
}

int experts_space(const ClusterSpec& spec) {
  for (std::size_t s = 0; s < spec.spaces.size(); ++s) {
    if (spec.spaces[s].name == "experts") return static_cast<int>(s);
  }
  return -1;
}

TEST(LoadedLayoutTest, AReducedReplicaPlacesItsExpertsByLoadAndHealthyOnesKeepTheirs) {
  ClusterSpec spec = moe_cluster();
  const int experts = experts_space(spec);
  ASSERT_GE(experts, 0);
  const FoldSyncStrategy fold;
  const ClusterLayout plain = plan_cluster(spec, fold).value();
  // A skewed router: expert e gets e^2 + 1 tokens (the later ones most).
  spec.unit_loads.assign(spec.spaces.size(), {});
  std::vector<double>& loads = spec.unit_loads[static_cast<std::size_t>(experts)];
  for (int e = 0; e < 8; ++e) loads.push_back(e * e + 1.0);
  const ClusterLayout loaded = plan_cluster(spec, fold).value();
  testing::check_layout_properties(loaded, /*balanced=*/false);
  for (int d : {0, 2}) {  // healthy: the balanced layout, whatever the loads
    EXPECT_EQ(loaded.replicas[static_cast<std::size_t>(d)].units,
              plain.replicas[static_cast<std::size_t>(d)].units)
        << "domain " << d;
  }
  const ReplicaLayout& reduced = loaded.replicas[1];
  const std::vector<IntervalSet> want = deal_by_load(loads, std::vector<double>(3, 1.0));
  EXPECT_EQ(reduced.units[static_cast<std::size_t>(experts)], want);
  const double by_load = load_imbalance(want, loads, std::vector<double>(3, 1.0));
  const double by_count = load_imbalance(plain.replicas[1].units[static_cast<std::size_t>(experts)],
                                         loads, std::vector<double>(3, 1.0));
  std::printf("8 experts of loads e^2 + 1 over TP 3: imbalance %.3f by load, %.3f by count\n",
              by_load, by_count);
  EXPECT_LT(by_load, by_count);
  // The other spaces are the balanced layout's.
  for (std::size_t s = 0; s < spec.spaces.size(); ++s) {
    if (static_cast<int>(s) == experts || spec.spaces[s].derived()) continue;
    EXPECT_EQ(reduced.units[s], plain.replicas[1].units[s]) << spec.spaces[s].name;
  }
}

TEST(LoadedLayoutTest, BadLoadsAreRejectedNamingTheSpaceAndTheFix) {
  ClusterSpec spec = moe_cluster();
  const int experts = experts_space(spec);
  const FoldSyncStrategy fold;
  spec.unit_loads.assign(2, {});
  EXPECT_NE(plan_cluster(spec, fold).status().message().find("one list per space"),
            std::string::npos);
  spec.unit_loads.assign(spec.spaces.size(), {});
  spec.unit_loads[static_cast<std::size_t>(experts)] = {1, 2, 3};
  EXPECT_NE(plan_cluster(spec, fold).status().message().find("experts has 3 unit loads for 8"),
            std::string::npos);
  spec.unit_loads[static_cast<std::size_t>(experts)] = {1, 2, 3, 4, 5, 6, 7, -1};
  EXPECT_NE(plan_cluster(spec, fold).status().message().find("experts unit 7 is -1"),
            std::string::npos);
}

}  // namespace
}  // namespace ntp::shard
