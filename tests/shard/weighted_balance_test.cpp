#include "shard/weighted_balance.h"

#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <limits>
#include <numeric>

#include "core/rng.h"
#include "shard/balance.h"

namespace ntp::shard {
namespace {

constexpr std::int64_t kUnits[] = {1, 2, 3, 7, 8, 13, 31, 72, 97, 127, 128, 509, 1021, 4093, 65521};

std::vector<std::int64_t> counts_of(std::int64_t units, const std::vector<double>& speeds,
                                    const std::vector<int>& priority = {}) {
  auto counts = weighted_counts(units, speeds, priority);
  EXPECT_TRUE(counts.ok()) << counts.status().to_string();
  return counts.ok() ? *counts : std::vector<std::int64_t>{};
}

double load(std::int64_t c, double s) { return static_cast<double>(c) / s; }

// The split is optimal iff no unit can move off a bottleneck without making its new owner at
// least as slow: for every rank b holding more than its forced one unit and every other rank j,
// (c_j + 1) / s_j >= c_b / s_b. Compared with the very expression the split uses, so exactly.
void expect_optimal(std::int64_t units, const std::vector<double>& speeds,
                    const std::vector<std::int64_t>& counts) {
  ASSERT_EQ(counts.size(), speeds.size());
  EXPECT_EQ(std::accumulate(counts.begin(), counts.end(), std::int64_t{0}), units);
  for (std::size_t b = 0; b < counts.size(); ++b) {
    ASSERT_GE(counts[b], 1) << "rank " << b;
    if (counts[b] == 1) continue;
    for (std::size_t j = 0; j < counts.size(); ++j) {
      if (j == b) continue;
      EXPECT_GE(load(counts[j] + 1, speeds[j]), load(counts[b], speeds[b]))
          << "a unit of rank " << b << " would finish sooner on rank " << j;
    }
  }
}

std::vector<double> random_speeds(Rng& rng, int ranks) {
  std::vector<double> s(static_cast<std::size_t>(ranks));
  for (double& v : s) {
    switch (rng.below(4)) {
      case 0:
        v = 1.0;
        break;
      case 1:
        v = 0.5;
        break;
      case 2:
        v = 0.05 + rng.uniform();
        break;
      default:
        v = 0.05;
        break;  // very slow
    }
  }
  return s;
}

TEST(WeightedCounts, EqualSpeedsGiveTheBalancedCountsExactly) {
  for (std::int64_t units : kUnits) {
    for (int ranks = 1; ranks <= 72 && ranks <= units; ++ranks) {
      for (double speed : {1.0, 0.37, 3.0, 1e-3}) {
        const std::vector<double> speeds(static_cast<std::size_t>(ranks), speed);
        const auto counts = counts_of(units, speeds);
        ASSERT_EQ(counts.size(), static_cast<std::size_t>(ranks));
        for (int r = 0; r < ranks; ++r) {
          ASSERT_EQ(counts[static_cast<std::size_t>(r)], balanced_count(units, ranks, r))
              << units << " units, " << ranks << " ranks at speed " << speed << ", rank " << r;
        }
      }
    }
  }
}

TEST(WeightedCounts, RandomSpeedsArePrimeUnitCountsSplitOptimally) {
  Rng rng(19);
  for (int trial = 0; trial < 3000; ++trial) {
    const int ranks = 1 + static_cast<int>(rng.below(72));
    std::int64_t units = kUnits[rng.below(std::size(kUnits))];
    if (units < ranks) units = ranks + static_cast<std::int64_t>(rng.below(200));
    const std::vector<double> speeds = random_speeds(rng, ranks);
    SCOPED_TRACE(std::to_string(units) + " units over " + std::to_string(ranks) + " ranks");
    expect_optimal(units, speeds, counts_of(units, speeds));
  }
}

TEST(WeightedCounts, MatchesBruteForceOnSmallCases) {
  const double kSpeeds[] = {1.0, 0.5, 0.05, 0.3, 2.0, 0.7};
  Rng rng(7);
  for (int trial = 0; trial < 400; ++trial) {
    const int ranks = 1 + static_cast<int>(rng.below(4));
    const std::int64_t units = ranks + static_cast<std::int64_t>(rng.below(10));
    std::vector<double> speeds;
    for (int r = 0; r < ranks; ++r) speeds.push_back(kSpeeds[rng.below(std::size(kSpeeds))]);
    // Every split with counts >= 1: the best bottleneck.
    double best = std::numeric_limits<double>::infinity();
    std::vector<std::int64_t> c(static_cast<std::size_t>(ranks), 1);
    std::function<void(int, std::int64_t)> walk = [&](int r, std::int64_t left) {
      if (r == ranks - 1) {
        c[static_cast<std::size_t>(r)] = left;
        best = std::min(best, weighted_bottleneck(c, speeds));
        return;
      }
      for (std::int64_t k = 1; k <= left - (ranks - 1 - r); ++k) {
        c[static_cast<std::size_t>(r)] = k;
        walk(r + 1, left - k);
      }
    };
    walk(0, units);
    EXPECT_EQ(weighted_bottleneck(counts_of(units, speeds), speeds), best)
        << units << " units over " << ranks << " ranks";
  }
}

TEST(WeightedCounts, AVerySlowRankKeepsOneUnitAndTheOthersShareTheRest) {
  for (int ranks = 2; ranks <= 72; ++ranks) {
    for (std::int64_t units : {127, 509, 65521}) {
      if (units < ranks) continue;
      std::vector<double> speeds(static_cast<std::size_t>(ranks), 1.0);
      speeds[static_cast<std::size_t>(ranks / 2)] = 0.05;
      const auto counts = counts_of(units, speeds);
      expect_optimal(units, speeds, counts);
      // The slow rank's proportional share is 0.05 L, L = units / (ranks - 1 + 0.05) the
      // continuous bottleneck. The optimum T >= L sits on a fast rank, so by optimality
      // (slow + 1) / 0.05 >= T >= L: slow >= 0.05 L - 1; and T <= L + 2 (the floors of the
      // proportional split leave fewer than `ranks` units, one more each for the fast ranks, at
      // most one round over), so slow <= 0.05 T <= 0.05 L + 0.1. Hence within one unit.
      const double share = static_cast<double>(units) * 0.05 / (ranks - 1 + 0.05);
      const auto slow = counts[static_cast<std::size_t>(ranks / 2)];
      EXPECT_LE(std::abs(static_cast<double>(slow) - share), 1.0)
          << units << " units, " << ranks << " ranks";
    }
  }
}

TEST(WeightedCounts, SeveralSpeedsAtOnceAreProportional) {
  // 1021 units at speeds 1 : 0.5 : 0.25. Loads are k, 2k and 4k; at bottleneck 583 the ranks hold
  // 583 + 291 + 145 = 1019 units, at 584 one more each fits (584, 292, 146 all cost 584): the two
  // missing units go to the first two ranks by the tie rule. Continuous optimum: 1021 / 1.75 =
  // 583.4.
  const std::vector<double> speeds{1.0, 0.5, 0.25};
  const auto counts = counts_of(1021, speeds);
  EXPECT_EQ(counts, (std::vector<std::int64_t>{584, 292, 145}));
  expect_optimal(1021, speeds, counts);
  EXPECT_EQ(weighted_bottleneck(counts, speeds), 584.0);
}

TEST(WeightedCounts, ScalingEverySpeedByAPowerOfTwoChangesNothing) {
  // Only ratios matter; a power of two scales every k / s exactly, so the split is identical.
  Rng rng(3);
  for (int trial = 0; trial < 500; ++trial) {
    const int ranks = 1 + static_cast<int>(rng.below(72));
    const std::int64_t units = ranks + static_cast<std::int64_t>(rng.below(5000));
    std::vector<double> speeds = random_speeds(rng, ranks);
    const auto counts = counts_of(units, speeds);
    for (double& s : speeds) s *= 0.25;
    EXPECT_EQ(counts_of(units, speeds), counts);
  }
}

TEST(WeightedCounts, TiesFollowThePriorityAndRepeatCallsAgree) {
  EXPECT_EQ(counts_of(10, {1, 1, 1, 1}), (std::vector<std::int64_t>{3, 3, 2, 2}));
  EXPECT_EQ(counts_of(10, {1, 1, 1, 1}, {3, 2, 1, 0}), (std::vector<std::int64_t>{2, 2, 3, 3}));
  EXPECT_EQ(counts_of(10, {1, 1, 1, 1}, {2, 0, 3, 1}), (std::vector<std::int64_t>{3, 2, 3, 2}));
  Rng rng(5);
  for (int trial = 0; trial < 200; ++trial) {
    const int ranks = 1 + static_cast<int>(rng.below(72));
    const std::int64_t units = ranks + static_cast<std::int64_t>(rng.below(70000));
    const std::vector<double> speeds = random_speeds(rng, ranks);
    EXPECT_EQ(counts_of(units, speeds), counts_of(units, speeds));
  }
}

TEST(WeightedCounts, HugeSpacesCostNoMoreThanSmallOnes) {
  // The prefix step places all but O(ranks) units at once: 2^40 units is as quick as 100.
  std::vector<double> speeds(72, 1.0);
  speeds[5] = 0.05;
  speeds[40] = 0.5;
  const std::int64_t units = std::int64_t{1} << 40;
  expect_optimal(units, speeds, counts_of(units, speeds));
}

TEST(WeightedCounts, BadInputIsRejectedNamingTheValue) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const double inf = std::numeric_limits<double>::infinity();
  for (double bad : {0.0, -1.0, nan, inf}) {
    auto r = weighted_counts(10, std::vector<double>{1.0, bad});
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(r.status().message().find("speed of rank 1"), std::string::npos)
        << r.status().message();
  }
  EXPECT_FALSE(weighted_counts(10, std::vector<double>{}).ok());
  auto few = weighted_counts(2, std::vector<double>{1, 1, 1});
  ASSERT_FALSE(few.ok());
  EXPECT_NE(few.status().message().find("2 units"), std::string::npos);
  EXPECT_FALSE(weighted_counts(10, std::vector<double>{1, 1}, std::vector<int>{0, 0}).ok());
  EXPECT_FALSE(weighted_counts(10, std::vector<double>{1, 1}, std::vector<int>{0}).ok());
  EXPECT_FALSE(weighted_counts(10, std::vector<double>{1, 1}, std::vector<int>{0, 2}).ok());
}

}  // namespace
}  // namespace ntp::shard
