// Speed-weighted cluster layouts: plan_cluster with ClusterSpec::speeds.
#include "shard/weighted_layout.h"

#include <gtest/gtest.h>

#include <limits>

#include "layout_properties.h"
#include "random_cluster.h"
#include "shard/cluster_layout.h"
#include "shard/fold_sync_strategy.h"
#include "shard/reshard_plan.h"
#include "shard/weighted_balance.h"

namespace ntp::shard {
namespace {

using testing::check_layout_properties;
using testing::describe;
using testing::random_cluster_spec;

// Every field of two layouts but their specs, which differ in `speeds` by construction.
void expect_same_layout(const ClusterLayout& a, const ClusterLayout& b) {
  ASSERT_EQ(a.replicas.size(), b.replicas.size());
  for (std::size_t d = 0; d < a.replicas.size(); ++d) {
    EXPECT_EQ(a.replicas[d].domain, b.replicas[d].domain);
    EXPECT_EQ(a.replicas[d].slots, b.replicas[d].slots) << "domain " << d;
    EXPECT_EQ(a.replicas[d].units, b.replicas[d].units) << "domain " << d;
  }
  EXPECT_EQ(a.sync.strategy, b.sync.strategy);
  EXPECT_EQ(a.sync.sync_degree, b.sync.sync_degree);
  ASSERT_EQ(a.sync.folds.size(), b.sync.folds.size());
  for (std::size_t i = 0; i < a.sync.folds.size(); ++i) {
    const FoldTransfer &x = a.sync.folds[i], &y = b.sync.folds[i];
    EXPECT_TRUE(x.space == y.space && x.domain == y.domain && x.from_rank == y.from_rank &&
                x.to_rank == y.to_rank && x.units == y.units)
        << "fold " << i;
  }
  ASSERT_EQ(a.sync.groups.size(), b.sync.groups.size());
  for (std::size_t i = 0; i < a.sync.groups.size(); ++i) {
    const DpGroup &x = a.sync.groups[i], &y = b.sync.groups[i];
    EXPECT_TRUE(x.space == y.space && x.index == y.index && x.units == y.units &&
                x.members == y.members)
        << "group " << i;
  }
  ASSERT_EQ(a.sync.costs.size(), b.sync.costs.size());
  for (std::size_t d = 0; d < a.sync.costs.size(); ++d) {
    ASSERT_EQ(a.sync.costs[d].size(), b.sync.costs[d].size());
    for (std::size_t r = 0; r < a.sync.costs[d].size(); ++r) {
      const RankSyncCost &x = a.sync.costs[d][r], &y = b.sync.costs[d][r];
      EXPECT_TRUE(x.fold_out_bytes == y.fold_out_bytes && x.fold_in_bytes == y.fold_in_bytes &&
                  x.dp_bytes == y.dp_bytes)
          << "costs of domain " << d << " rank " << r;
    }
  }
}

// Equal speeds within every domain (a different value per domain, none for some), and arbitrary
// speeds on failed slots, which must not matter.
ClusterSpec with_equal_speeds(ClusterSpec spec, Rng& rng) {
  spec.speeds.assign(static_cast<std::size_t>(spec.domains), {});
  for (int d = 0; d < spec.domains; ++d) {
    if (rng.below(4) == 0) continue;
    const double speed = std::vector<double>{1.0, 0.3, 2.5, 0.05}[rng.below(4)];
    auto& of_domain = spec.speeds[static_cast<std::size_t>(d)];
    for (int l = 0; l < spec.domain_size; ++l) {
      of_domain.push_back(spec.is_failed({d, l}) ? 0.01 + rng.uniform() : speed);
    }
  }
  return spec;
}

// Some domains slowed: one very slow slot (0.05), or several slots at several speeds.
ClusterSpec with_random_speeds(ClusterSpec spec, Rng& rng) {
  spec.speeds.assign(static_cast<std::size_t>(spec.domains), {});
  for (int d = 0; d < spec.domains; ++d) {
    if (rng.below(2) == 0) continue;
    auto& of_domain = spec.speeds[static_cast<std::size_t>(d)];
    of_domain.assign(static_cast<std::size_t>(spec.domain_size), 1.0);
    const int slowed = 1 + static_cast<int>(rng.below(3));
    for (int i = 0; i < slowed; ++i) {
      const double speed = std::vector<double>{0.05, 0.5, 0.2 + rng.uniform()}[rng.below(3)];
      of_domain[rng.below(static_cast<std::uint64_t>(spec.domain_size))] = speed;
    }
  }
  return spec;
}

std::vector<double> rank_speeds(const ClusterSpec& spec, const ReplicaLayout& replica) {
  std::vector<double> out;
  for (int l : replica.slots) out.push_back(spec.speed(replica.domain, l));
  return out;
}

// Weighted domains hold optimal counts for the speeds of the slots their ranks run on (the
// bottleneck is the same for any optimal split, whatever the tie rule: compared exactly);
// unweighted domains hold exactly what the unweighted plan gives them.
void check_weighted_counts(const ClusterLayout& layout, const ClusterLayout& unweighted) {
  const ClusterSpec& spec = layout.spec;
  for (const ReplicaLayout& replica : layout.replicas) {
    const auto d = static_cast<std::size_t>(replica.domain);
    if (!spec.weighted(replica.domain)) {
      EXPECT_EQ(replica.units, unweighted.replicas[d].units) << "domain " << d;
      continue;
    }
    const std::vector<double> speeds = rank_speeds(spec, replica);
    for (std::size_t sp = 0; sp < spec.spaces.size(); ++sp) {
      std::vector<std::int64_t> counts;
      for (const IntervalSet& s : replica.units[sp]) counts.push_back(s.count());
      auto best = weighted_counts(spec.spaces[sp].units, speeds);
      ASSERT_TRUE(best.ok());
      EXPECT_EQ(weighted_bottleneck(counts, speeds), weighted_bottleneck(*best, speeds))
          << "domain " << d << " space " << spec.spaces[sp].name;
    }
  }
}

// Units that arrive in domain d, space sp, over all transfers of `plan`.
std::int64_t moved_units(const ReshardPlan& plan, int d, int sp) {
  std::int64_t n = 0;
  for (const ShardTransfer& t : plan.transfers) {
    if (t.destination.domain == d && t.space == sp) n += t.units.count();
  }
  return n;
}

TEST(WeightedLayout, EqualSpeedsGiveTheUnweightedLayoutBitForBit) {
  Rng rng(1901);
  for (int trial = 0; trial < 300; ++trial) {
    const ClusterSpec spec = random_cluster_spec(rng);
    const ClusterSpec equal = with_equal_speeds(spec, rng);
    const ClusterSpec spec2 = testing::fail_more(spec, rng, 2);
    ClusterSpec equal2 = spec2;
    equal2.speeds = equal.speeds;
    for (const auto& strategy : testing::all_strategies(spec)) {
      SCOPED_TRACE(describe(spec) + " " + std::string(strategy->name()));
      auto plain = plan_cluster(spec, *strategy);
      auto same = plan_cluster(equal, *strategy);
      ASSERT_TRUE(plain.ok() && same.ok()) << same.status().to_string();
      expect_same_layout(*same, *plain);
      // And after a failure, planned from each one's previous layout.
      auto plain2 = plan_cluster(spec2, *strategy, &*plain);
      auto same2 = plan_cluster(equal2, *strategy, &*same);
      ASSERT_TRUE(plain2.ok() && same2.ok());
      expect_same_layout(*same2, *plain2);
    }
  }
}

TEST(WeightedLayout, PlanUnitsOverTheBalancedUnitsIsThePlanItself) {
  // The sync derived over given units (the weighted path) agrees with the strategies' own plan.
  Rng rng(1902);
  for (int trial = 0; trial < 200; ++trial) {
    const ClusterSpec spec = random_cluster_spec(rng);
    std::vector<int> degrees;
    for (int d = 0; d < spec.domains; ++d) degrees.push_back(spec.degree(d));
    for (const auto& strategy : testing::all_strategies(spec)) {
      const StrategyPlan plan = strategy->plan(degrees, spec.spaces, spec.bytes);
      const StrategyPlan again = strategy->plan_units(degrees, plan.units, spec.spaces, spec.bytes);
      ClusterLayout a, b;
      a.sync = plan.sync;
      b.sync = again.sync;
      SCOPED_TRACE(describe(spec) + " " + std::string(strategy->name()));
      EXPECT_EQ(again.units, plan.units);
      expect_same_layout(a, b);
    }
  }
}

TEST(WeightedLayout, RandomWeightedClustersSatisfyLayoutPropertiesWithOptimalCounts) {
  Rng rng(1903);
  int core_folds_out = 0;  // folds out of a fold core rank: only weighted layouts have them
  for (int trial = 0; trial < 200; ++trial) {
    const ClusterSpec plain = random_cluster_spec(rng);
    const ClusterSpec spec = with_random_speeds(plain, rng);
    for (const auto& strategy : testing::all_strategies(spec)) {
      SCOPED_TRACE(describe(spec) + " " + std::string(strategy->name()));
      auto layout = plan_cluster(spec, *strategy);
      auto unweighted = plan_cluster(plain, *strategy);
      ASSERT_TRUE(layout.ok() && unweighted.ok()) << layout.status().to_string();
      check_layout_properties(*layout, /*balanced=*/false);
      check_weighted_counts(*layout, *unweighted);
      if (layout->sync.strategy == "fold") {
        for (const FoldTransfer& f : layout->sync.folds) {
          core_folds_out += f.from_rank < layout->sync.sync_degree ? 1 : 0;
        }
      }
      auto again = plan_cluster(spec, *strategy);
      ASSERT_TRUE(again.ok());
      EXPECT_EQ(testing::fingerprint(*again), testing::fingerprint(*layout)) << "determinism";
    }
  }
  EXPECT_GT(core_folds_out, 0) << "the cases never exercised a fast core rank's excess units";
}

TEST(WeightedLayout, ARebalanceWithTheSameMembersMovesOnlyTheUnitsWhoseOwnerCountChanged) {
  Rng rng(1904);
  for (int trial = 0; trial < 120; ++trial) {
    const ClusterSpec plain = random_cluster_spec(rng);
    const ClusterSpec slowed = with_random_speeds(plain, rng);
    for (const auto& strategy : testing::all_strategies(plain)) {
      SCOPED_TRACE(describe(slowed) + " " + std::string(strategy->name()));
      auto before = plan_cluster(plain, *strategy);
      ASSERT_TRUE(before.ok());
      auto after = plan_cluster(slowed, *strategy, &*before);
      ASSERT_TRUE(after.ok());
      auto there = plan_reshard(*before, *after);
      ASSERT_TRUE(there.ok());
      EXPECT_EQ(there->dp_peer_bytes, 0);
      for (int d = 0; d < plain.domains; ++d) {
        const ReplicaLayout& old_r = before->replicas[static_cast<std::size_t>(d)];
        const ReplicaLayout& new_r = after->replicas[static_cast<std::size_t>(d)];
        ASSERT_EQ(new_r.slots, old_r.slots) << "ranks stay on their slots";
        for (std::size_t sp = 0; sp < plain.spaces.size(); ++sp) {
          std::int64_t want = 0;
          for (int k = 0; k < new_r.degree(); ++k) {
            want +=
                std::max<std::int64_t>(0, new_r.units[sp][static_cast<std::size_t>(k)].count() -
                                              old_r.units[sp][static_cast<std::size_t>(k)].count());
          }
          EXPECT_EQ(moved_units(*there, d, static_cast<int>(sp)), want)
              << "domain " << d << " space " << plain.spaces[sp].name;
        }
      }
      // Speeds back to equal: exactly the balanced layout again, moving the same units back.
      auto back = plan_cluster(plain, *strategy, &*after);
      ASSERT_TRUE(back.ok());
      expect_same_layout(*back, *before);
      auto home = plan_reshard(*after, *back);
      ASSERT_TRUE(home.ok());
      for (int d = 0; d < plain.domains; ++d) {
        for (int sp = 0; sp < static_cast<int>(plain.spaces.size()); ++sp) {
          EXPECT_EQ(moved_units(*home, d, sp), moved_units(*there, d, sp));
        }
      }
      // A second rebalance depends on the first layout only through the rank -> slot mapping.
      const ClusterSpec slowed_again = with_random_speeds(plain, rng);
      auto from_weighted = plan_cluster(slowed_again, *strategy, &*after);
      auto from_balanced = plan_cluster(slowed_again, *strategy, &*before);
      ASSERT_TRUE(from_weighted.ok() && from_balanced.ok());
      expect_same_layout(*from_weighted, *from_balanced);
    }
  }
}

TEST(WeightedLayout, EveryDegreeOfA72SlotDomainWithAVerySlowRank) {
  for (const bool fold : {true, false}) {
    for (int degree = 1; degree <= 72; ++degree) {
      ClusterSpec spec = testing::three_nvl72_with_one_at(
          degree, {.heads = 127, .hidden = 127, .ffn = 1021, .vocab = 257});
      spec.speeds.assign(3, std::vector<double>(72, 1.0));
      spec.speeds[1][static_cast<std::size_t>(degree / 2)] = 0.05;  // healthy: slots < degree
      spec.speeds[1][static_cast<std::size_t>(degree - 1)] *= 0.5;
      spec.speeds[2][7] = 0.05;
      spec.speeds[2][30] = 0.7;
      ClusterSpec plain = spec;
      plain.speeds.clear();
      const auto strategies = testing::all_strategies(spec);
      const SyncStrategy& strategy = *strategies[fold ? 0 : 1];
      SCOPED_TRACE("degree " + std::to_string(degree) + " " + std::string(strategy.name()));
      auto layout = plan_cluster(spec, strategy);
      auto unweighted = plan_cluster(plain, strategy);
      ASSERT_TRUE(layout.ok() && unweighted.ok()) << layout.status().to_string();
      check_layout_properties(*layout, /*balanced=*/false);
      check_weighted_counts(*layout, *unweighted);
      // The very slow rank 7 of domain 2 (slot 7, speed 0.05) next to rank 0 (slot 0, speed 1):
      // by optimality it holds one unit or (c_7 / 0.05 <= (c_0 + 1) / 1) at most (c_0 + 1) / 20,
      // up to the rounding of the division by 0.05.
      const ReplicaLayout& r2 = layout->replicas[2];
      for (std::size_t sp = 0; sp < spec.spaces.size(); ++sp) {
        const std::int64_t slow = r2.units[sp][7].count(), fast = r2.units[sp][0].count();
        EXPECT_TRUE(slow == 1 ||
                    static_cast<double>(slow) <= static_cast<double>(fast + 1) / 20.0 + 1e-9)
            << slow << " units at speed 0.05 against " << fast << " at speed 1";
      }
    }
  }
}

TEST(WeightedLayout, AFailureInAWeightedDomainKeepsEachSpeedWithItsSlot) {
  Rng rng(1905);
  for (int trial = 0; trial < 150; ++trial) {
    const ClusterSpec spec = with_random_speeds(random_cluster_spec(rng), rng);
    ClusterSpec failed = testing::fail_more(spec, rng, 2);
    ClusterSpec failed_plain = failed;
    failed_plain.speeds.clear();
    for (const auto& strategy : testing::all_strategies(spec)) {
      SCOPED_TRACE(describe(failed) + " " + std::string(strategy->name()));
      auto before = plan_cluster(spec, *strategy);
      ASSERT_TRUE(before.ok());
      auto after = plan_cluster(failed, *strategy, &*before);
      auto unweighted = plan_cluster(failed_plain, *strategy, &*before);
      ASSERT_TRUE(after.ok() && unweighted.ok());
      check_layout_properties(*after, /*balanced=*/false);
      // Unit counts follow the speeds of the slots the ranks now run on.
      check_weighted_counts(*after, *unweighted);
      // Units whose every copy died (one domain) can only come from a checkpoint.
      auto reshard = plan_reshard(*before, *after);
      EXPECT_TRUE(reshard.ok() || reshard.status().code() == StatusCode::kNotFound)
          << reshard.status().to_string();
    }
  }
}

TEST(WeightedLayout, BadSpeedsAreRejectedNamingTheSlotAndTheFix) {
  ClusterSpec spec;
  spec.domains = 2;
  spec.domain_size = 4;
  spec.spaces = model_unit_spaces({.heads = 8, .hidden = 16, .ffn = 32, .vocab = 0});
  const FoldSyncStrategy strategy;
  auto rejected = [&](std::vector<std::vector<double>> speeds, const std::string& needle) {
    ClusterSpec s = spec;
    s.speeds = std::move(speeds);
    auto layout = plan_cluster(s, strategy);
    ASSERT_FALSE(layout.ok());
    EXPECT_EQ(layout.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(layout.status().message().find(needle), std::string::npos)
        << layout.status().message();
  };
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const double inf = std::numeric_limits<double>::infinity();
  rejected({{1, 1, 1, 1}}, "speeds are given for 1 domains");
  rejected({{}, {1, 1, 1}}, "domain 1 has 3 speeds for 4 slots");
  rejected({{}, {1, 1, 1, 0}}, "speed of slot 1:3 is 0");
  rejected({{1, -2, 1, 1}, {}}, "speed of slot 0:1 is -2");
  rejected({{1, nan, 1, 1}, {}}, "speed of slot 0:1 is nan");
  rejected({{1, 1, 1, 1}, {inf, 1, 1, 1}}, "speed of slot 1:0 is inf");
  ClusterSpec fine = spec;
  fine.speeds = {{}, {1, 0.5, 1, 1}};
  EXPECT_TRUE(plan_cluster(fine, strategy).ok());
}

}  // namespace
}  // namespace ntp::shard
