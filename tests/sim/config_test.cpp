#include <gtest/gtest.h>

#include "sim/config.h"
#include "sim/report.h"
#include "sim_test_util.h"

namespace ntp::sim {
namespace {

Status parse_error(const std::string& toml, const std::vector<std::string>& overrides = {}) {
  Result<SimConfig> c = parse_config(toml, overrides);
  return c.status();
}

void expect_error(const Status& s, const std::string& needle) {
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.to_string();
  EXPECT_NE(s.message().find(needle), std::string::npos) << s.message();
}

TEST(SimConfig, ShippedConfigsParse) {
  for (const char* name : {"paper-b200-nvl32.toml", "paper-b200-nvl32-spares.toml",
                           "paper-b200-nvl32-moe.toml", "gb200-nvl72.toml", "trace-replay.toml"}) {
    Result<SimConfig> c = load_config(std::string(NTP_SOURCE_DIR) + "/configs/sim/" + name);
    EXPECT_TRUE(c.ok()) << name << ": " << c.status().to_string();
  }
  Result<SimConfig> moe =
      load_config(std::string(NTP_SOURCE_DIR) + "/configs/sim/paper-b200-nvl32-moe.toml");
  ASSERT_TRUE(moe.ok());
  EXPECT_EQ(moe->model.experts, 64);
  EXPECT_TRUE(moe->model.experts_whole);
  // 64 experts over 28 GPUs: 3 on the busiest against 64 / 28 = 2.29.
  EXPECT_NE(moe_note(*moe).find("at TP 28 the busiest GPU holds 3 experts against 2.29 ideal"),
            std::string::npos)
      << moe_note(*moe);
  Result<SimConfig> paper =
      load_config(std::string(NTP_SOURCE_DIR) + "/configs/sim/paper-b200-nvl32.toml");
  ASSERT_TRUE(paper.ok());
  EXPECT_EQ(paper->system.gpus, 32768);
  EXPECT_EQ(paper->domains(), 1024);
  EXPECT_EQ(paper->replicas(), 128);
  EXPECT_EQ(paper->run.policies.size(), 6u);
}

TEST(SimConfig, EmptyConfigIsThePaperDefaults) {
  Result<SimConfig> c = parse_config("");
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  EXPECT_EQ(c->parallel.tp, 32);
  EXPECT_EQ(c->run.policies, default_policies());
}

TEST(SimConfig, UnknownKeyIsNamed) {
  expect_error(parse_error("[model]\nlayerz = 3\n"), "model.layerz");
  expect_error(parse_error("[modle]\nlayers = 3\n"), "modle");
  expect_error(parse_error("gpus = 3\n"), "gpus");
}

// The per-communicator rebuild's keys are gone: a config that sets one is told what replaced it.
TEST(SimConfig, TheRemovedCommunicatorKeysNameTheirReplacement) {
  expect_error(parse_error("[recovery]\ncommunicator_connect_seconds = 0.5\n"),
               "recovery.formation_seconds");
  expect_error(parse_error("", {"recovery.base_communicators=3"}), "recovery.base_communicators");
}

TEST(SimConfig, NegativeRateIsNamed) {
  const Status s = parse_error("[failures]\nrate_per_gpu_day = -1e-3\n");
  expect_error(s, "failures.rate_per_gpu_day");
  expect_error(s, "-0.001");
  expect_error(parse_error("[failures]\nrate_multiplier = -2\n"), "failures.rate_multiplier");
}

TEST(SimConfig, DomainNotDivisibleByTpIsNamed) {
  const Status s = parse_error("[parallel]\ndomain_size = 30\n[system]\ngpus = 30720\n");
  expect_error(s, "parallel.domain_size = 30");
  expect_error(s, "parallel.tp = 32");
}

TEST(SimConfig, ModelThatDoesNotFitAtMinimumDegreeIsNamed) {
  const Status s = parse_error(
      "[parallel]\nmin_degree = 4\ndegree_multiple = 1\ndistributed_optimizer = false\n");
  expect_error(s, "does not fit");
  expect_error(s, "parallel.min_degree = 4");
  expect_error(s, "system.hbm_gb = 189");
}

TEST(SimConfig, WrongTypesAndBadValues) {
  expect_error(parse_error("[parallel]\ntp = 2.5\n"), "parallel.tp");
  expect_error(parse_error("[sim]\nfixed_batch = 1\n"), "sim.fixed_batch");
  expect_error(parse_error("[sim]\npolicies = [\"DP-DROP\", \"YOLO\"]\n"), "YOLO");
  expect_error(parse_error("[sim]\npolicies = [\"SPARES(x)\"]\n"), "SPARES(x)");
  expect_error(parse_error("[failures]\nblast_sizes = [1, 3]\nblast_weights = [1, 1]\n"),
               "blast_sizes entry 3");
  expect_error(parse_error("[failures]\nblast_sizes = [1, 4]\nblast_weights = [1]\n"),
               "equal length");
  expect_error(parse_error("[model]\nlayers = \n"), "not valid TOML");
  expect_error(parse_error("[parallel]\nmin_degree = 40\n"), "parallel.min_degree = 40");
}

TEST(SimConfig, OverridesApplyBeforeValidation) {
  Result<SimConfig> c =
      parse_config("", {"failures.rate_multiplier=2.5", "sim.policies=[\"NTP\"]", "parallel.pp=4"});
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  EXPECT_DOUBLE_EQ(c->failures.rate_multiplier, 2.5);
  ASSERT_EQ(c->run.policies.size(), 1u);
  EXPECT_EQ(c->run.policies[0].kind, PolicyKind::kNtp);
  EXPECT_EQ(c->parallel.pp, 4);
  expect_error(parse_error("", {"failures.rate_multiplier=-1"}), "failures.rate_multiplier");
  expect_error(parse_error("", {"nodot=1"}), "section.key=value");
  expect_error(parse_error("", {"failures.colour=1"}), "failures.colour");
}

TEST(Policy, NamesRoundTrip) {
  std::vector<PolicySpec> all = default_policies();
  all.push_back({PolicyKind::kNtpPwLive, 0});
  for (const PolicySpec& p : all) {
    Result<PolicySpec> back = parse_policy(p.name());
    ASSERT_TRUE(back.ok()) << p.name();
    EXPECT_EQ(*back, p);
  }
}

}  // namespace
}  // namespace ntp::sim
