// Each fail-slow mitigation's capacity against hand-computed cases, and the weighted split that
// REBALANCE rests on.
//
// testing::small_config: 64 GPUs, TP 4 = domain, PP 1, so 16 replicas of one 4-GPU group; the
// model has 8 heads and 1024 FFN units (hidden 256 x 4, one column per unit), min degree 2,
// degree multiple 1, communication so fast that a stage's work is its compute to ~1e-6 and
// dp_factor is exactly 1. Per unit of work: a head costs F_head / 8 = (8 x 256^2 + 2 x 128 x
// 256) / 8 = 73,728 FLOPs per token and layer, an FFN unit F_ffn / 1024 = 4 x 256 x 1024 / 1024
// = 1,024: a head is 72 FFN units.
#include "sim/slow_state.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "power/power_model.h"
#include "shard/balance.h"
#include "sim/weighted_split.h"
#include "sim_test_util.h"

namespace ntp::sim {
namespace {

// Brute force: the best max_i u_i / w_i over every split of `units` over the ranks.
double brute_split(int units, const std::vector<double>& w) {
  double best = 1e300;
  std::vector<int> u(w.size(), 0);
  std::function<void(std::size_t, int)> go = [&](std::size_t i, int left) {
    if (i + 1 == w.size()) {
      u[i] = left;
      double t = 0;
      for (std::size_t k = 0; k < w.size(); ++k) t = std::max(t, u[k] / w[k]);
      best = std::min(best, t);
      return;
    }
    for (int x = 0; x <= left; ++x) {
      u[i] = x;
      go(i + 1, left - x);
    }
  };
  go(0, units);
  return best;
}

TEST(WeightedSplit, EqualSpeedsAreTheBalancedSplit) {
  for (int units : {1, 7, 8, 128, 1023}) {
    for (int ranks : {1, 3, 4, 7, 32}) {
      EXPECT_DOUBLE_EQ(weighted_split_time(units, ranks, {}),
                       static_cast<double>(shard::max_units_per_rank(units, ranks)))
          << units << " over " << ranks;
    }
  }
}

TEST(WeightedSplit, MatchesBruteForceOnSmallCases) {
  const std::vector<std::vector<double>> slows = {
      {0.5}, {0.3}, {0.9}, {0.5, 0.25}, {0.7, 0.7}, {1.0}, {0.33, 0.66, 0.99}};
  for (const auto& slow : slows) {
    for (int fast = 0; fast <= 3; ++fast) {
      for (int units = 0; units <= 11; ++units) {
        std::vector<double> w(fast, 1.0);
        w.insert(w.end(), slow.begin(), slow.end());
        EXPECT_NEAR(weighted_split_time(units, fast, slow), brute_split(units, w), 1e-12)
            << units << " units, " << fast << " fast, first slow " << slow[0];
      }
    }
  }
}

TEST(WeightedSplit, HandCases) {
  // 8 heads over speeds 1, 1, 1, 0.5: (3, 2, 2, 1) takes 3; any T < 3 fits at most 2 + 2 + 2 + 1.
  EXPECT_DOUBLE_EQ(weighted_split_time(8, 3, {0.5}), 3.0);
  // 1024 units: T = 293 fits 3 x 293 + 146 = 1025; 292.5 fits 876 + 146 = 1022.
  EXPECT_DOUBLE_EQ(weighted_split_time(1024, 3, {0.5}), 293.0);
  // A slow rank's step can bind: 5 units over 1 and 0.4: 4 + 1 takes max(4, 2.5) = 4, but
  // 3 + 1 fits only 4; T = 3.75 holds floor(3.75) + floor(1.5) = 4 < 5, so 4.
  EXPECT_DOUBLE_EQ(weighted_split_time(5, 1, {0.4}), 4.0);
  // 3 units over 1 and 0.8: T = 1.25 holds 1 + 1 = 2; T = 2 holds 2 + 1 = 3.
  EXPECT_DOUBLE_EQ(weighted_split_time(3, 1, {0.8}), 2.0);
  // 4 units over 1 and 0.8: T = 2.5 holds 2 + 2 (2.5 x 0.8 = 2): the slow rank binds at 2 / 0.8.
  EXPECT_DOUBLE_EQ(weighted_split_time(4, 1, {0.8}), 2.5);
}

// Two spaces (a coarse one of cost 3, a fine one of cost 1), chosen together per rank.
double brute_joint(int coarse, int fine, const std::vector<double>& w) {
  double best = 1e300;
  const std::size_t n = w.size();
  std::vector<int> c(n, 0), f(n, 0);
  std::function<void(std::size_t, int, int)> go = [&](std::size_t i, int cl, int fl) {
    if (i + 1 == n) {
      c[i] = cl;
      f[i] = fl;
      double t = 0;
      for (std::size_t k = 0; k < n; ++k) t = std::max(t, (3.0 * c[k] + f[k]) / w[k]);
      best = std::min(best, t);
      return;
    }
    for (int x = 0; x <= cl; ++x) {
      for (int y = 0; y <= fl; ++y) {
        c[i] = x;
        f[i] = y;
        go(i + 1, cl - x, fl - y);
      }
    }
  };
  go(0, coarse, fine);
  return best;
}

TEST(WeightedSplit, JointSpacesWithinOneFineUnitOfBruteForce) {
  const std::vector<std::vector<double>> slows = {{0.5}, {0.3}, {0.9}, {0.5, 0.25}, {0.7, 0.7}};
  for (const auto& slow : slows) {
    for (int fast = 0; fast <= 2; ++fast) {
      std::vector<double> w(fast, 1.0);
      w.insert(w.end(), slow.begin(), slow.end());
      const double min_w = *std::min_element(w.begin(), w.end());
      for (int coarse = 0; coarse <= 4; ++coarse) {
        for (int fine = 0; fine <= 6; ++fine) {
          const double t = weighted_split_time({{coarse, 3.0}, {fine, 1.0}}, fast, slow);
          const double opt = brute_joint(coarse, fine, w);
          // The documented bound: at most one fine unit on the slowest rank above the optimum.
          // (1e-9: the split allows 1e-12 of a unit of slack against rounding.)
          EXPECT_GE(t, opt - 1e-9) << coarse << "+" << fine << ", " << fast << " fast";
          EXPECT_LE(t, opt + 1.0 / min_w + 1e-9) << coarse << "+" << fine << ", " << fast;
        }
      }
    }
  }
  // The small config's stage in FFN units (a head = 72): 458 at speeds 1, 1, 1, 0.5, exactly.
  EXPECT_NEAR(weighted_split_time({{8, 72.0}, {1024, 1.0}}, 3, {0.5}), 458.0, 1e-9);
  EXPECT_NEAR(weighted_split_time({{8, 72.0}, {1024, 1.0}}, 4, {}), 400.0, 1e-9);
}

class SlowRates : public ::testing::Test {
 protected:
  explicit SlowRates(std::vector<std::string> extra = {}) {
    extra.push_back("fail_slow.enabled=true");
    config_ = testing::small_config(1, extra);
    workload_.emplace(config_);
    state_.emplace(config_, *workload_, model_);
    slow_.emplace(config_, *workload_, model_);
  }
  double capacity(const std::string& policy) {
    Result<PolicySpec> p = parse_policy(policy);
    NTP_CHECK_MSG(p.ok(), p.status().to_string());
    return slow_->adjust(*state_, *p, state_->rates(*p)).capacity;
  }
  SimConfig config_;
  power::PowerModel model_;
  std::optional<Workload> workload_;
  std::optional<ClusterState> state_;
  std::optional<SlowState> slow_;
};

// One GPU of a healthy cluster at half speed.
TEST_F(SlowRates, OneGpuAtHalfSpeedUnderEveryMitigation) {
  ASSERT_TRUE(slow_->start(0, 0.5));
  EXPECT_FALSE(slow_->start(0, 0.8));  // already slow: thinning, nothing changes
  // Unmitigated: replica 0 runs at 0.5 and all 16 wait for it.
  for (const char* p : {"NTP", "NTP-PW", "NTP-LIVE", "DP-DROP", "SPARES(2)", "CKPT-RESTART"}) {
    EXPECT_DOUBLE_EQ(capacity(p), 16 * 0.5) << p;
  }
  // SHARE: replica 0 takes half a share, the 15 others full ones.
  for (const char* p : {"NTP+SHARE", "NTP-PW+SHARE", "DP-DROP+SHARE", "CKPT-RESTART+SHARE"}) {
    EXPECT_DOUBLE_EQ(capacity(p), 15.5) << p;
  }
  // REBALANCE: in FFN units (a head costs 72 of them) the stage holds 8 x 72 + 1024 = 1600, 400
  // per rank when even. Ranks of speed 1, 1, 1, 0.5 fit 3 floor(t) + floor(t / 2) in time t:
  // 1603 at t = 458, 1599 below (the heads go 3, 3, 2, 0 or so, any way that fits), so the
  // replica runs at 400 / 458 = 0.8734, near the ideal 3.5 / 4 = 0.875.
  const double rho = 400.0 / 458.0;
  EXPECT_NEAR(workload_->rebalanced_speed(4, {0.5}), rho, 1e-12);
  EXPECT_NEAR(capacity("NTP+REBALANCE"), 15 + rho, 1e-12);
  // BOOST: 1 / rho = 1.145 is within throughput(1.3) = 1.1557: the boost keeps full pace.
  const double boosted = rho * model_.throughput(1.3);
  EXPECT_NEAR(boosted, 1.0093, 1e-4);  // > 1: the boost needed is below the cap
  EXPECT_NEAR(1 / rho, 1.1450, 1e-4);
  ASSERT_LT(1 / rho, model_.throughput(1.3));
  EXPECT_DOUBLE_EQ(capacity("NTP-PW+BOOST"), 16);
  // DROP (0.5 < drop_below 0.6): NTP runs the group at TP 3 with today's balanced layout, 3
  // heads + 342 units on its busiest rank: speed 400 / (3 x 72 + 342) = 400 / 558 (to the ~1e-6
  // of TP communication).
  EXPECT_NEAR(capacity("NTP+DROP"), 15 + 400.0 / 558.0, 1e-5);
  EXPECT_DOUBLE_EQ(capacity("NTP+DROP"), 15 + workload_->speed(3));
  EXPECT_DOUBLE_EQ(capacity("DP-DROP+DROP"), 15);       // the replica stops
  EXPECT_DOUBLE_EQ(capacity("SPARES(2)+DROP"), 16);     // a spare domain takes its place
  EXPECT_DOUBLE_EQ(capacity("CKPT-RESTART+DROP"), 16);  // swapped out (the restart is not priced)
  slow_->end(0);
  EXPECT_DOUBLE_EQ(capacity("NTP"), 16);
}

// Above drop_below, DROP shares; the boost that fits in the headroom keeps full pace.
TEST_F(SlowRates, MildSlowdownIsSharedOrBoostedAway) {
  ASSERT_TRUE(slow_->start(5, 0.9));
  EXPECT_DOUBLE_EQ(capacity("NTP+DROP"), 15.9);
  EXPECT_DOUBLE_EQ(capacity("DP-DROP+DROP"), 15.9);
  // In FFN units: speeds 1, 1, 1, 0.9 fit 3 floor(t) + floor(0.9 t): 1602 at t = 411, at most
  // 1230 + 369 = 1599 below, so 400 / 411 = 0.9732 (ideal 3.9 / 4 = 0.975).
  const double rho = 400.0 / 411.0;
  EXPECT_NEAR(capacity("NTP+REBALANCE"), 15 + rho, 1e-12);
  EXPECT_DOUBLE_EQ(capacity("NTP-PW+BOOST"), 16);
}

// Two slowed replicas: unmitigated waits for the slowest, SHARE adds both shares.
TEST_F(SlowRates, TwoSlowedReplicas) {
  ASSERT_TRUE(slow_->start(0, 0.5));
  ASSERT_TRUE(slow_->start(9, 0.8));  // replica 2
  EXPECT_DOUBLE_EQ(capacity("NTP"), 8);
  EXPECT_DOUBLE_EQ(capacity("NTP+SHARE"), 14 + 0.5 + 0.8);
  EXPECT_DOUBLE_EQ(capacity("DP-DROP+DROP"), 14 + 0.8);
  // Two slowed GPUs in one group: its slowest sets the pace.
  ASSERT_TRUE(slow_->start(1, 0.7));
  EXPECT_DOUBLE_EQ(capacity("NTP+SHARE"), 14 + 0.5 + 0.8);
}

// A slowed GPU in a degraded group: the factor applies on top of the reduced degree's speed.
TEST_F(SlowRates, SlowGpuInADegradedGroup) {
  ASSERT_EQ(state_->fail(0, 1), 1);
  const double s3 = workload_->speed(3);
  ASSERT_TRUE(slow_->start(1, 0.5));
  EXPECT_DOUBLE_EQ(capacity("NTP"), (15 + s3) * 0.5);
  EXPECT_DOUBLE_EQ(capacity("NTP+SHARE"), 15 + s3 * 0.5);
  EXPECT_DOUBLE_EQ(capacity("NTP+REBALANCE"), 15 + s3 * workload_->rebalanced_speed(3, {0.5}));
  // DP-DROP's replica 0 is out already: the slow GPU in it changes nothing.
  EXPECT_DOUBLE_EQ(capacity("DP-DROP"), 15);
  // CKPT-RESTART replaced the failed GPU; the slow one still stalls the job.
  EXPECT_DOUBLE_EQ(capacity("CKPT-RESTART"), 8);
  // A GPU both failed and slow counts as failed only.
  ASSERT_TRUE(slow_->start(0, 0.3));
  EXPECT_DOUBLE_EQ(capacity("NTP+SHARE"), 15 + s3 * 0.5);
}

// SPARES(2) = 2 spare groups: after two failed replicas took them, a dropped one stays out.
TEST_F(SlowRates, SparesLeftOverForADroppedReplica) {
  ASSERT_EQ(state_->fail(4, 1), 1);
  ASSERT_EQ(state_->fail(8, 1), 1);
  ASSERT_DOUBLE_EQ(state_->rates(*parse_policy("SPARES(2)")).capacity, 16);
  ASSERT_TRUE(slow_->start(20, 0.5));
  EXPECT_DOUBLE_EQ(capacity("SPARES(2)+DROP"), 15);
  EXPECT_DOUBLE_EQ(capacity("SPARES(3)+DROP"), 16);
}

// The documented exception: with 2 of 16 DP-DROP replicas running, dropping one slowed to 0.55
// keeps 1 replica, waiting for it keeps 2 x 0.55 = 1.1.
TEST_F(SlowRates, DropCanLoseWhenFewReplicasRun) {
  for (std::int64_t r = 2; r < 16; ++r) ASSERT_EQ(state_->fail(4 * r, 1), 1);
  ASSERT_TRUE(slow_->start(0, 0.55));
  EXPECT_DOUBLE_EQ(capacity("DP-DROP"), 2 * 0.55);
  EXPECT_DOUBLE_EQ(capacity("DP-DROP+DROP"), 1);
  EXPECT_DOUBLE_EQ(capacity("DP-DROP+SHARE"), 1.55);
}

class SlowRatesRounded : public SlowRates {
 protected:
  SlowRatesRounded() : SlowRates({"parallel.degree_multiple=2"}) {}
};

// With degree_multiple 2 a group with one failed GPU runs at TP 2 and idles one healthy GPU: the
// slowest, so a slowed GPU there costs nothing.
TEST_F(SlowRatesRounded, RoundingIdlesTheSlowestHealthyGpu) {
  ASSERT_EQ(state_->fail(0, 1), 1);
  const double base = state_->rates(*parse_policy("NTP")).capacity;
  ASSERT_TRUE(slow_->start(1, 0.5));
  EXPECT_DOUBLE_EQ(capacity("NTP"), base);
  ASSERT_TRUE(slow_->start(2, 0.8));  // two slowed, one idled: the 0.8 one is active
  EXPECT_DOUBLE_EQ(capacity("NTP+SHARE"), base - workload_->speed(2) * (1 - 0.8));
}

// REBALANCE on the shipped configs whose heads and FFN units divide evenly by TP (the paper's
// TP32 stage: 128 heads; h100-70b-tp8: 64 heads), by hand. Per token and layer a stage's work is
// W = F_head + F_ffn (F_head = 8h^2 + 2sh, F_ffn = 4hf), U FFN units of c = F_ffn / U each;
// healthy, every rank does W / d. With k slowed ranks at s the speeds sum to S = d - k(1 - s):
//   - no split beats the continuous one, W / S per rank, so speed <= S / d (the brief's
//     (d - 1 + s) / d for one slowed rank);
//   - give each rank whole heads within its budget s_i W / S, then floor-many FFN units: fewer
//     than d units are left (the floors drop < 1 each), one more to each fast rank costs at most
//     c, so the best whole-unit split takes <= W / S + c; weighted_split is within one fine unit
//     (c) of that best (WeightedSplit.JointSpacesWithinOneFineUnitOfBruteForce):
//     speed >= (W / d) / (W / S + 2c).
// Also the figures docs/sim.md quotes: 0.9841 (paper, one GPU at 0.5), 0.93746 (h100).
TEST(RebalancedSpeed, WithinUnitsOfTheContinuousSplitOnShippedConfigs) {
  struct Case {
    const char* file;
    double quoted_half;  // docs/sim.md: one GPU at 0.5
  };
  for (const Case& k :
       {Case{"paper-b200-nvl32.toml", 0.9841}, Case{"h100-70b-tp8.toml", 0.93746}}) {
    Result<SimConfig> c = load_config(std::string(NTP_SOURCE_DIR) + "/configs/sim/" + k.file, {});
    ASSERT_TRUE(c.ok()) << c.status().to_string();
    const Workload w(*c);
    const ModelConfig& m = c->model;
    const int d = c->parallel.tp;
    const double h = m.hidden, f = m.ffn_multiplier * m.hidden;
    const double units = std::round(f / m.ffn_unit_columns);
    ASSERT_EQ(m.heads % d, 0) << k.file;
    ASSERT_EQ(static_cast<std::int64_t>(units) % d, 0) << k.file;
    const double f_ffn = 4 * h * f, work = 8 * h * h + 2 * m.sequence * h + f_ffn;
    const double unit = f_ffn / units;
    for (double s : {0.9, 0.8, 0.5, 0.3}) {
      for (int slowed : {1, 2}) {
        const double sum = d - slowed * (1 - s);
        const double rho = w.rebalanced_speed(d, std::vector<double>(slowed, s));
        EXPECT_LE(rho, sum / d + 1e-12) << k.file << " s " << s << " x" << slowed;
        EXPECT_GE(rho, (work / d) / (work / sum + 2 * unit)) << k.file << " s " << s;
      }
    }
    // 4 digits as quoted (5 for h100's).
    EXPECT_NEAR(w.rebalanced_speed(d, {0.5}), k.quoted_half, 5e-5) << k.file;
  }
}

}  // namespace
}  // namespace ntp::sim
