// The fail-slow episode generator and the [fail_slow] config: the draws follow the configured
// distributions within their Monte Carlo error, bad values are refused naming the key.
#include "sim/slow_events.h"

#include <gtest/gtest.h>

#include <cmath>

#include "sim/config.h"
#include "sim_test_util.h"

namespace ntp::sim {
namespace {

// Tolerances are 4 standard errors of the statistic over n draws: a correct generator fails one
// of them with probability ~6e-5 (the stream is fixed by the seed, so a pass is stable).
constexpr int kDraws = 20000;
double four_se(double sd) { return 4.0 * sd / std::sqrt(static_cast<double>(kDraws)); }

TEST(SlowProcess, RatesFactorsAndDurationsFollowTheConfig) {
  // 64 GPUs x 1 episode per GPU-day; factor 0.5 with weight 1, 0.8 with weight 3; 2 h mean.
  const SimConfig c = testing::small_config(
      1, {"fail_slow.enabled=true", "fail_slow.rate_per_gpu_day=1", "fail_slow.factors=[0.5, 0.8]",
          "fail_slow.factor_weights=[1, 3]", "fail_slow.mean_hours=2"});
  SlowProcess p(c, Rng(11), 0.0);
  const double gap = 86400.0 / 64;  // mean inter-arrival of the cluster stream (s)
  EXPECT_DOUBLE_EQ(p.cluster_rate(), 1.0 / gap);
  double last = 0, duration_sum = 0, gpu_sum = 0;
  int half = 0, long_ones = 0;
  for (int i = 0; i < kDraws; ++i) {
    const SlowEvent e = p.next();
    ASSERT_GT(e.time_s, last);
    last = e.time_s;
    ASSERT_TRUE(e.factor == 0.5 || e.factor == 0.8) << e.factor;
    ASSERT_GE(e.gpu, 0);
    ASSERT_LT(e.gpu, 64);
    ASSERT_GT(e.duration_s, 0);
    half += e.factor == 0.5 ? 1 : 0;
    duration_sum += e.duration_s;
    long_ones += e.duration_s > 7200.0 ? 1 : 0;
    gpu_sum += static_cast<double>(e.gpu);
  }
  // Exponential gaps: sd = mean.
  EXPECT_NEAR(last / kDraws, gap, four_se(gap));
  // Bernoulli(1/4): sd = sqrt(p (1 - p)).
  EXPECT_NEAR(half / static_cast<double>(kDraws), 0.25, four_se(std::sqrt(0.25 * 0.75)));
  // Exponential durations: mean 7200 s (sd 7200) and P(> mean) = 1/e.
  EXPECT_NEAR(duration_sum / kDraws, 7200.0, four_se(7200.0));
  const double p_long = std::exp(-1.0);
  EXPECT_NEAR(long_ones / static_cast<double>(kDraws), p_long,
              four_se(std::sqrt(p_long * (1 - p_long))));
  // Uniform GPU in 0..63: mean 31.5, variance (64^2 - 1) / 12.
  EXPECT_NEAR(gpu_sum / kDraws, 31.5, four_se(std::sqrt((64.0 * 64.0 - 1) / 12.0)));
}

TEST(SlowProcess, EqualWeightsWithoutFactorWeightsAndNothingWhenOff) {
  // Giving factors without weights means equal weights (the defaults' 1:2:1 no longer apply).
  const SimConfig c = testing::small_config(
      1,
      {"fail_slow.enabled=true", "fail_slow.rate_per_gpu_day=1", "fail_slow.factors=[0.5, 0.8]"});
  EXPECT_TRUE(c.fail_slow.factor_weights.empty());
  SlowProcess p(c, Rng(5), 0.0);
  int half = 0;
  for (int i = 0; i < kDraws; ++i) half += p.next().factor == 0.5 ? 1 : 0;
  EXPECT_NEAR(half / static_cast<double>(kDraws), 0.5, four_se(0.5));
  // A single number is a one-element list (what --sweep fail_slow.factors=0.5,0.8 passes).
  EXPECT_EQ(testing::small_config(1, {"fail_slow.factors=0.3"}).fail_slow.factors,
            std::vector<double>{0.3});
  // Disabled, or enabled at rate 0: no episode ever.
  for (const char* on : {"fail_slow.enabled=false", "fail_slow.rate_per_gpu_day=0"}) {
    const SimConfig off =
        testing::small_config(1, {"fail_slow.enabled=true", "fail_slow.rate_per_gpu_day=1", on});
    EXPECT_FALSE(off.fail_slow.active()) << on;
    SlowProcess none(off, Rng(5), 0.0);
    EXPECT_TRUE(std::isinf(none.next().time_s)) << on;
  }
}

TEST(SlowProcess, DefaultsAreOffAndAsDocumented) {
  const Result<SimConfig> c = parse_config("");
  ASSERT_TRUE(c.ok());
  EXPECT_FALSE(c->fail_slow.enabled);
  EXPECT_DOUBLE_EQ(c->fail_slow.rate_per_gpu_day, c->failures.rate_per_gpu_day);
  EXPECT_EQ(c->fail_slow.factors, (std::vector<double>{0.5, 0.75, 0.9}));
  EXPECT_DOUBLE_EQ(c->fail_slow.mean_hours, 1.0);
  EXPECT_DOUBLE_EQ(c->fail_slow.drop_below, 0.6);
}

void expect_refused(const std::vector<std::string>& overrides, const std::string& needle) {
  const Result<SimConfig> c = parse_config("", overrides);
  ASSERT_FALSE(c.ok()) << needle;
  EXPECT_EQ(c.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(c.status().message().find(needle), std::string::npos) << c.status().message();
}

TEST(SlowConfig, BadValuesAreNamed) {
  expect_refused({"fail_slow.rate_per_gpu_day=-1"}, "fail_slow.rate_per_gpu_day' = -1");
  expect_refused({"fail_slow.rate_multiplier=-0.5"}, "fail_slow.rate_multiplier' = -0.5");
  expect_refused({"fail_slow.factors=[0.5, 1.5]"}, "fail_slow.factors entry 1.5 is outside (0, 1]");
  expect_refused({"fail_slow.factors=0"}, "fail_slow.factors entry 0 is outside (0, 1]");
  expect_refused({"fail_slow.factors=[-0.2]"}, "fail_slow.factors entry -0.2");
  expect_refused({"fail_slow.factors=[]"}, "fail_slow.factors is empty");
  expect_refused({"fail_slow.mean_hours=0"}, "fail_slow.mean_hours' = 0");
  expect_refused({"fail_slow.mean_hours=-2"}, "fail_slow.mean_hours' = -2");
  expect_refused({"fail_slow.factor_weights=[1, 2]"}, "fail_slow.factor_weights has 2 entries");
  expect_refused({"fail_slow.factors=[0.5]", "fail_slow.factor_weights=[0]"}, "sum to 0");
  expect_refused({"fail_slow.drop_below=2"}, "fail_slow.drop_below' = 2");
  expect_refused({"fail_slow.enabeld=true"}, "fail_slow.enabeld");
  expect_refused({"fail_slow.enabled=1"}, "fail_slow.enabled' must be true or false");
}

TEST(SlowConfig, MitigationSuffixesParseAndNeedTheirBase) {
  Result<PolicySpec> share = parse_policy("DP-DROP+SHARE");
  ASSERT_TRUE(share.ok());
  EXPECT_EQ(share->slow, SlowMitigation::kShare);
  EXPECT_EQ(share->name(), "DP-DROP+SHARE");
  Result<PolicySpec> plain = parse_policy("NTP+UNMITIGATED");
  ASSERT_TRUE(plain.ok());
  EXPECT_EQ(plain->name(), "NTP");  // unmitigated is today's policy, named as today
  for (const char* name : {"SPARES(4)+DROP", "NTP+REBALANCE", "NTP-LIVE+REBALANCE", "NTP-PW+BOOST",
                           "NTP-PW-LIVE+BOOST", "CKPT-RESTART+DROP", "NTP-PW+SHARE"}) {
    Result<PolicySpec> p = parse_policy(name);
    ASSERT_TRUE(p.ok()) << name << ": " << p.status().to_string();
    EXPECT_EQ(p->name(), name);
  }
  auto refused = [](const char* name, const char* needle) {
    Result<PolicySpec> p = parse_policy(name);
    ASSERT_FALSE(p.ok()) << name;
    EXPECT_NE(p.status().message().find(needle), std::string::npos) << p.status().message();
  };
  refused("DP-DROP+REBALANCE", "REBALANCE needs an NTP policy");
  refused("CKPT-RESTART+BOOST", "BOOST needs a power-boosting policy");
  refused("NTP+BOOST", "use NTP-PW+BOOST");
  refused("NTP+FASTER", "unknown fail-slow mitigation 'FASTER'");
  refused("NTQ+SHARE", "unknown policy 'NTQ'");
}

}  // namespace
}  // namespace ntp::sim
