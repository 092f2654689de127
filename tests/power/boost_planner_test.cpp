#include "power/boost_planner.h"

#include <gtest/gtest.h>

namespace ntp::power {
namespace {

const DomainPowerSpec kSpec{30, 1000.0, 0.3};

TEST(BoostPlanner, HealthyDomainNeedsNoBoost) {
  const BoostPlan p = plan_boost(PowerModel(), 1.0, kSpec);
  EXPECT_DOUBLE_EQ(p.power_factor, 1.0);
  EXPECT_TRUE(p.keeps_pace);
  EXPECT_DOUBLE_EQ(p.domain_watts, 30 * 1000.0);
}

TEST(BoostPlanner, LeastBoostThatKeepsPace) {
  const PowerModel m;
  const double speed = 0.9;
  const BoostPlan p = plan_boost(m, speed, kSpec);
  EXPECT_TRUE(p.keeps_pace);
  EXPECT_DOUBLE_EQ(p.batch_share, 1.0);
  EXPECT_NEAR(speed * m.throughput(p.power_factor), 1.0, 1e-9);
  // Anything less than the plan falls short.
  EXPECT_LT(speed * m.throughput(p.power_factor - 1e-4), 1.0);
  EXPECT_NEAR(p.domain_watts, 30 * 1000.0 * p.power_factor, 1e-6);
  EXPECT_LE(p.domain_watts, p.rack_budget_watts);
}

TEST(BoostPlanner, ShortBudgetFallsBackToScale) {
  const PowerModel m;
  const double speed = 0.8;  // needs 1.25x, more than throughput(1.3) = 1.1557
  const BoostPlan p = plan_boost(m, speed, kSpec);
  EXPECT_FALSE(p.keeps_pace);
  EXPECT_DOUBLE_EQ(p.power_factor, 1.3);
  EXPECT_NEAR(p.batch_share, 0.8 * m.throughput(1.3), 1e-12);
  EXPECT_NEAR(p.domain_watts, p.rack_budget_watts, 1e-6);
}

TEST(BoostPlanner, NoHeadroomMeansNoBoost) {
  const BoostPlan p = plan_boost(PowerModel(), 0.9, {30, 1000.0, 0.0});
  EXPECT_DOUBLE_EQ(p.power_factor, 1.0);
  EXPECT_DOUBLE_EQ(p.batch_share, 0.9);
}

// The edge of the paper's claim: +30% is exactly enough for a domain at 1 / throughput(1.3).
TEST(BoostPlanner, ThirtyPercentCoversSpeedsDownToItsThroughput) {
  const PowerModel m;
  const double edge = 1.0 / m.throughput(1.3);
  EXPECT_TRUE(plan_boost(m, edge + 1e-6, kSpec).keeps_pace);
  EXPECT_FALSE(plan_boost(m, edge - 1e-4, kSpec).keeps_pace);
}

TEST(Energy, JoulesAreWattsTimesSeconds) {
  EXPECT_DOUBLE_EQ(energy_joules(32, 1000.0, 1.2, 3600.0), 32 * 1000.0 * 1.2 * 3600.0);
}

}  // namespace
}  // namespace ntp::power
