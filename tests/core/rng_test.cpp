#include "core/rng.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

namespace ntp {
namespace {

TEST(Rng, SameSeedSameStream) {
  Rng a(42), b(42), c(43);
  bool differs = false;
  for (int i = 0; i < 100; ++i) {
    const auto x = a.next_u64();
    EXPECT_EQ(x, b.next_u64());
    differs |= (x != c.next_u64());
  }
  EXPECT_TRUE(differs);
}

TEST(Rng, BelowIsInRangeAndRoughlyUniform) {
  Rng rng(7);
  std::vector<int> counts(7, 0);
  const int n = 70000;
  for (int i = 0; i < n; ++i) {
    const auto x = rng.below(7);
    ASSERT_LT(x, 7u);
    ++counts[x];
  }
  for (int c : counts) EXPECT_NEAR(c, n / 7, 5 * std::sqrt(n / 7.0));
}

TEST(Rng, MomentsOfContinuousDraws) {
  Rng rng(11);
  const int n = 200000;
  double su = 0, sn = 0, sn2 = 0, se = 0;
  for (int i = 0; i < n; ++i) {
    const double u = rng.uniform();
    ASSERT_GE(u, 0.0);
    ASSERT_LT(u, 1.0);
    su += u;
    const double z = rng.normal();
    sn += z;
    sn2 += z * z;
    se += rng.exponential(4.0);
  }
  EXPECT_NEAR(su / n, 0.5, 0.005);
  EXPECT_NEAR(sn / n, 0.0, 0.01);
  EXPECT_NEAR(sn2 / n, 1.0, 0.02);
  EXPECT_NEAR(se / n, 0.25, 0.005);
}

TEST(Rng, ForkIsIndependentOfParentAdvance) {
  Rng a(5);
  Rng f1 = a.fork(9);
  Rng f2 = Rng(5).fork(9);
  EXPECT_EQ(f1.next_u64(), f2.next_u64());
  EXPECT_NE(Rng(5).fork(1).next_u64(), Rng(5).fork(2).next_u64());
}

}  // namespace
}  // namespace ntp
