// A replica's pace from its layout, and the boost that buys part of it back (train/replica_pace.h):
// figures worked by hand from unit counts, and the power model's published points.
#include "train/replica_pace.h"

#include <gtest/gtest.h>

#include "power/power_model.h"
#include "shard/fold_sync_strategy.h"

namespace ntp::train {
namespace {

// 3 replicas of 4 slots; 12 heads of 10 parameters and 8 FFN units of 1. Healthy: 3 heads and
// 2 units per rank, 32 parameters. With slot 1:0 failed, replica 1's ranks hold 4 heads each and
// 3, 3, 2 units: its slowest rank 43, so it runs at 32 / 43 of a healthy replica.
shard::ClusterLayout layout_with_slot_1_0_failed() {
  shard::ClusterSpec spec;
  spec.domains = 3;
  spec.domain_size = 4;
  spec.failed = {{1, 0}};
  spec.spaces = {{"heads", 12, 10}, {"ffn", 8, 1}};
  const shard::FoldSyncStrategy fold;
  auto layout = shard::plan_cluster(spec, fold);
  EXPECT_TRUE(layout.ok()) << layout.status().to_string();
  return *layout;
}

constexpr double kDegraded = 32.0 / 43.0;

TEST(ReplicaPaceTest, AReplicaRunsAtItsSlowestRanksShareOfAHealthyOnes) {
  const std::vector<ReplicaPace> paces =
      plan_replica_paces(layout_with_slot_1_0_failed(), BatchPolicy::kScale, 1.0);
  ASSERT_EQ(paces.size(), 3u);
  EXPECT_EQ(paces[0].unboosted, 1.0);
  EXPECT_EQ(paces[2].unboosted, 1.0);
  EXPECT_DOUBLE_EQ(paces[1].unboosted, kDegraded);
  EXPECT_EQ(paces_of(paces), (std::vector<double>{1.0, paces[1].unboosted, 1.0}));
  for (const ReplicaPace& p : paces) EXPECT_EQ(p.boost.power_factor, 1.0);
}

TEST(ReplicaPaceTest, BoostGoesAsFarAsTheControlCanAndTheShareCoversTheRest) {
  const shard::ClusterLayout layout = layout_with_slot_1_0_failed();
  const power::PowerModel model;
  // A control that can set 1.3 x TDP (the rack budget's cap too): 43/32 = 1.34 needs more than
  // throughput(1.3) = 1.1557, so the replica runs at 1.3 x TDP and 32/43 x 1.1557 of a healthy one.
  const std::vector<ReplicaPace> full = plan_replica_paces(layout, BatchPolicy::kBoost, 1.3);
  EXPECT_DOUBLE_EQ(full[1].boost.power_factor, 1.3);
  EXPECT_NEAR(full[1].pace(), kDegraded * model.throughput(1.3), 1e-12);
  EXPECT_FALSE(full[1].boost.keeps_pace);
  EXPECT_EQ(full[0].boost.power_factor, 1.0);
  // A control limited to 1.1 x TDP boosts to 1.1.
  const std::vector<ReplicaPace> part = plan_replica_paces(layout, BatchPolicy::kBoost, 1.1);
  EXPECT_NEAR(part[1].boost.power_factor, 1.1, 1e-12);
  EXPECT_NEAR(part[1].pace(), kDegraded * model.throughput(1.1), 1e-12);
  // One that cannot change power (the CPU's) boosts nothing: the share does it all.
  const std::vector<ReplicaPace> none = plan_replica_paces(layout, BatchPolicy::kBoost, 1.0);
  EXPECT_EQ(none[1].boost.power_factor, 1.0);
  EXPECT_DOUBLE_EQ(none[1].pace(), kDegraded);
  // keep and scale never boost, whatever the control could do.
  for (BatchPolicy p : {BatchPolicy::kKeep, BatchPolicy::kScale}) {
    EXPECT_EQ(plan_replica_paces(layout, p, 1.3)[1].boost.power_factor, 1.0);
  }
}

}  // namespace
}  // namespace ntp::train
