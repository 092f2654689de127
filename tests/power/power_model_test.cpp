#include "power/power_model.h"

#include <gtest/gtest.h>

namespace ntp::power {
namespace {

// The paper's two published points: 1.1x power costs 2.8% perf/W, 1.2x costs 6.5%.
TEST(PowerModel, PassesThroughThePapersTwoPoints) {
  const PowerModel m;
  EXPECT_NEAR(m.perf_per_watt(1.1), 1.0 - 0.028, 1e-12);
  EXPECT_NEAR(m.perf_per_watt(1.2), 1.0 - 0.065, 1e-12);
  // Throughput = power x perf/W: the paper's ~+6.9% and ~+12.2%.
  EXPECT_NEAR(m.throughput(1.1), 1.1 * 0.972, 1e-12);
  EXPECT_NEAR(m.throughput(1.2), 1.2 * 0.935, 1e-12);
  EXPECT_DOUBLE_EQ(m.throughput(1.0), 1.0);
}

TEST(PowerModel, FitReproducesAnyTwoPoints) {
  PowerCalibration c;
  c.factor_1 = 1.05;
  c.perf_per_watt_1 = 0.99;
  c.factor_2 = 1.25;
  c.perf_per_watt_2 = 0.90;
  Result<PowerModel> m = PowerModel::fit(c);
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  EXPECT_NEAR(m->perf_per_watt(1.05), 0.99, 1e-12);
  EXPECT_NEAR(m->perf_per_watt(1.25), 0.90, 1e-12);
}

TEST(PowerModel, FitRejectsNonsense) {
  PowerCalibration same;
  same.factor_2 = same.factor_1;
  EXPECT_EQ(PowerModel::fit(same).status().code(), StatusCode::kInvalidArgument);
  PowerCalibration rising;  // perf/W that rises with power is not physical
  rising.perf_per_watt_1 = 1.05;
  rising.perf_per_watt_2 = 1.08;
  EXPECT_EQ(PowerModel::fit(rising).status().code(), StatusCode::kInvalidArgument);
}

TEST(PowerModel, ThroughputIncreasesUpToTheMaximumFactorThenFalls) {
  const PowerModel m;
  EXPECT_GT(m.max_factor(), 1.3);  // the paper's +30% is inside the useful range
  double last = 0;
  for (double p = 1.0; p <= m.max_factor(); p += 0.01) {
    EXPECT_GT(m.throughput(p), last) << p;
    last = m.throughput(p);
  }
  // Past the peak the derivative is negative: check with the raw formula just beyond it.
  const double x = m.max_factor() - 1 + 0.05;
  const double beyond =
      (1 + x) * (1 - m.linear_coefficient() * x - m.quadratic_coefficient() * x * x);
  EXPECT_LT(beyond, m.throughput(m.max_factor()));
}

TEST(PowerModel, PowerForSpeedupInvertsThroughput) {
  const PowerModel m;
  for (double s : {1.0, 1.01, 1.05, 1.0692, 1.1, 1.122, 1.15}) {
    const double p = m.power_for_speedup(s);
    EXPECT_NEAR(m.throughput(p), s, 1e-9) << s;
  }
  EXPECT_NEAR(m.power_for_speedup(1.1 * 0.972), 1.1, 1e-9);
}

}  // namespace
}  // namespace ntp::power
