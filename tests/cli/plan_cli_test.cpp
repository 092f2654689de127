// End-to-end tests of `ntp plan` through the real binary.
#include <gtest/gtest.h>

#include <algorithm>
#include <nlohmann/json.hpp>
#include <set>

#include "child_process.h"

namespace ntp {
namespace {

using testing::run_command;

testing::CommandOutput ntp(std::vector<std::string> args) {
  args.insert(args.begin(), NTP_BINARY);
  return run_command(args);
}

// A small valid `ntp plan` command line; `extra` adds flags or overrides the defaults.
std::vector<std::string> plan_args(std::vector<std::string> extra) {
  std::vector<std::string> args = {"plan"};
  for (const auto& [flag, value] :
       {std::pair{"--domains", "3"}, {"--tp", "8"}, {"--heads", "16"}, {"--ffn", "64"}}) {
    if (std::find(extra.begin(), extra.end(), flag) == extra.end()) {
      args.push_back(flag);
      args.push_back(value);
    }
  }
  args.insert(args.end(), extra.begin(), extra.end());
  return args;
}

TEST(NtpCli, HelpAndVersion) {
  auto help = ntp({"--help"});
  EXPECT_EQ(help.exit_code, 0);
  EXPECT_NE(help.out.find("plan"), std::string::npos);
  auto plan_help = ntp({"plan", "--help"});
  EXPECT_EQ(plan_help.exit_code, 0);
  for (const char* flag : {"--domains", "--tp", "--failed", "--min-tp", "--repair", "--json"}) {
    EXPECT_NE(plan_help.out.find(flag), std::string::npos) << flag;
  }
  auto version = ntp({"--version"});
  EXPECT_EQ(version.exit_code, 0);
  EXPECT_EQ(version.out.rfind("ntp ", 0), 0u);
}

TEST(NtpPlan, BadInputIsOneLineOnStderrAndExitCode2) {
  struct Case {
    std::vector<std::string> extra;
    std::string mentions;
  };
  const std::vector<Case> cases = {
      {{"--failed", "0:1,0:2,0:3", "--min-tp", "6"}, "below --min-tp 6"},
      {{"--domains", "1", "--failed", "0:0,0:1,0:2,0:3,0:4,0:5,0:6,0:7"},
       "every one of the 1 domains left the job"},
      {{"--failed", "0:8"}, "slot 8 is out of range"},
      {{"--failed", "5:0"}, "domain 5 is out of range"},
      {{"--failed", "0-1"}, "'0-1' has no ':'"},
      {{"--failed", "0:1,,2:2"}, "DOMAIN:SLOT"},
      {{"--repair", "0:1"}, "--repair 0:1 is not a failed slot"},
      {{"--heads", "5"}, "heads has 5 units, fewer than TP degree 8"},
      {{"--ffn-block", "7"}, "--ffn 64 is not a multiple of --ffn-block 7"},
      {{"--domains", "x"}, "--domains"},
  };
  for (const Case& c : cases) {
    auto r = ntp(plan_args(c.extra));
    EXPECT_EQ(r.exit_code, 2) << c.mentions;
    EXPECT_TRUE(r.out.empty()) << c.mentions << ": stdout was " << r.out;
    EXPECT_NE(r.err.find(c.mentions), std::string::npos) << "stderr: " << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << "stderr: " << r.err;
  }
}

TEST(NtpPlan, JsonFollowsTheDocumentedSchema) {
  auto r =
      ntp(plan_args({"--failed", "0:3,2:0,2:7", "--vocab", "50", "--repair", "2:7", "--json"}));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto doc = nlohmann::json::parse(r.out);
  const std::vector<int> degrees = {7, 8, 6};
  ASSERT_EQ(doc["replicas"].size(), 3u);
  for (int d = 0; d < 3; ++d) {
    const auto& replica = doc["replicas"][static_cast<std::size_t>(d)];
    EXPECT_EQ(replica["domain"], d);
    EXPECT_EQ(replica["degree"], degrees[static_cast<std::size_t>(d)]);
    EXPECT_EQ(replica["slots"].size(),
              static_cast<std::size_t>(degrees[static_cast<std::size_t>(d)]));
    for (const auto& [space, units] : {std::pair{"heads", 16}, {"ffn", 64}, {"vocab", 50}}) {
      const auto& per_rank = replica["units"][space];
      ASSERT_EQ(per_rank.size(), static_cast<std::size_t>(degrees[static_cast<std::size_t>(d)]));
      std::multiset<int> seen;
      for (const auto& rank : per_rank) {
        for (int u : rank) seen.insert(u);
      }
      ASSERT_EQ(seen.size(), static_cast<std::size_t>(units)) << space;
      for (int u = 0; u < units; ++u) EXPECT_EQ(seen.count(u), 1u) << space << " unit " << u;
    }
  }
  EXPECT_EQ(doc["sync"]["sync_degree"], 6);
  EXPECT_EQ(doc["sync"]["dp_groups"].size(), 3u * 6u);
  long long bytes = 0;
  for (const auto& t : doc["reshard"]["failure"]["transfers"]) bytes += t["bytes"].get<long long>();
  EXPECT_EQ(bytes, doc["reshard"]["failure"]["intra_domain_bytes"].get<long long>() +
                       doc["reshard"]["failure"]["dp_peer_bytes"].get<long long>());
  EXPECT_GT(doc["reshard"]["failure"]["dp_peer_bytes"].get<long long>(), 0);
  ASSERT_FALSE(doc["reshard"]["repair"].is_null());
  EXPECT_EQ(doc["reshard"]["repair"]["dp_peer_bytes"], 0);
  EXPECT_EQ(doc["repaired"]["replicas"][2]["degree"], 7);
}

TEST(NtpPlan, NativeStrategyLeavesHealthyReplicasAlone) {
  auto r = ntp(plan_args({"--failed", "1:4", "--strategy", "native", "--json"}));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto doc = nlohmann::json::parse(r.out);
  EXPECT_EQ(doc["sync"]["strategy"], "native");
  for (const auto& t : doc["reshard"]["failure"]["transfers"]) {
    EXPECT_EQ(t["destination"][0], 1) << "only the degraded domain receives state";
  }
  for (const auto& f : doc["sync"]["folds"]) EXPECT_EQ(f["domain"], 1);
  auto bad = ntp(plan_args({"--strategy", "megatron"}));
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_NE(bad.err.find("--strategy 'megatron' is unknown"), std::string::npos) << bad.err;
}

TEST(NtpPlan, TextReportNamesEveryDegradedReplica) {
  auto r = ntp(plan_args({"--failed", "1:2,1:5"}));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(r.err.empty());
  EXPECT_NE(r.out.find("sync degree 6"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("0-1,3-4,6-7"), std::string::npos) << "active slots of domain 1\n" << r.out;
  EXPECT_NE(r.out.find("reshard on failure (2 GPUs lost)"), std::string::npos) << r.out;
}

// Every slot of domain 1 failed: its replica left the job (as ntp train has it), the two others
// form the DP groups, and repairing one slot brings it back at TP 1.
TEST(NtpPlan, ADomainWhoseEverySlotFailedLeftTheJob) {
  auto r = ntp(plan_args({"--failed", "1:0,1:1,1:2,1:3,1:4,1:5,1:6,1:7", "--repair", "1:4"}));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("left the job: every slot failed"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("DP groups of 2 members"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("reshard on repair (1 GPUs back)"), std::string::npos) << r.out;
}

// A MoE (--experts with --kv-heads): the experts are a unit space dealt whole over each
// replica's ranks, every expert exactly once per replica: 20 experts at TP 8 are 3/2 per rank, at
// TP 7 (slot 1:3 failed) 3/2 as well, and the imbalance of the degraded replica is 3 / (20 / 7).
// Without --kv-heads the flag is refused naming the fix.
TEST(NtpPlan, ExpertsAreAUnitSpaceDealtWhole) {
  auto r = ntp(plan_args(
      {"--failed", "1:3", "--kv-heads", "4", "--vocab", "64", "--experts", "20", "--json"}));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto doc = nlohmann::json::parse(r.out);
  for (int d = 0; d < 3; ++d) {
    const auto& per_rank = doc["replicas"][static_cast<std::size_t>(d)]["units"]["experts"];
    ASSERT_EQ(per_rank.size(), d == 1 ? 7u : 8u);
    std::multiset<int> seen;
    std::size_t most = 0;
    for (const auto& rank : per_rank) {
      most = std::max(most, rank.size());
      for (int u : rank) seen.insert(u);
    }
    EXPECT_EQ(most, 3u) << d;
    for (int u = 0; u < 20; ++u) EXPECT_EQ(seen.count(u), 1u) << "domain " << d << " expert " << u;
  }
  auto text =
      ntp(plan_args({"--failed", "1:3", "--kv-heads", "4", "--vocab", "64", "--experts", "20"}));
  ASSERT_EQ(text.exit_code, 0) << text.err;
  EXPECT_NE(text.out.find("experts 1.050"), std::string::npos) << text.out;  // 3 / (20 / 7)
  auto bad = ntp(plan_args({"--experts", "20"}));
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_NE(bad.err.find("--experts 20 needs a grouped-query (MoE) shape"), std::string::npos)
      << bad.err;
}

// --expert-loads: the reduced replica (TP 7) places its 10 experts by load, as the trainer does.
// Expert 0 alone carries 40 of 130 routed tokens, so no placement beats a busiest rank of 40: the
// deal (heaviest first, each to the least-loaded rank) gives it a rank of its own, and the
// imbalance is 40 / (130 / 7) exactly. Bad loads exit 2 naming the flag.
TEST(NtpPlan, ExpertLoadsPlaceAReducedReplicasExpertsByLoad) {
  const std::vector<std::string> moe = {"--failed",       "1:3",
                                        "--kv-heads",     "4",
                                        "--vocab",        "64",
                                        "--experts",      "10",
                                        "--expert-loads", "40,30,20,10,5,5,5,5,5,5"};
  std::vector<std::string> json = moe;
  json.push_back("--json");
  auto r = ntp(plan_args(json));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto doc = nlohmann::json::parse(r.out);
  const auto& reduced = doc["replicas"][1];
  ASSERT_EQ(reduced["degree"], 7);
  EXPECT_DOUBLE_EQ(reduced["load_imbalance"]["experts"].get<double>(), 40.0 / (130.0 / 7.0));
  for (const auto& rank : reduced["units"]["experts"]) {
    if (std::find(rank.begin(), rank.end(), 0) != rank.end()) {
      EXPECT_EQ(rank.size(), 1u);  // expert 0 alone
    }
  }
  EXPECT_TRUE(doc["replicas"][0].contains("load_imbalance"));  // healthy: reported, not re-dealt
  auto text = ntp(plan_args(moe));
  ASSERT_EQ(text.exit_code, 0) << text.err;
  EXPECT_NE(text.out.find("experts by load 2.154"), std::string::npos) << text.out;
  auto few = ntp(
      plan_args({"--kv-heads", "4", "--vocab", "64", "--experts", "10", "--expert-loads", "1,2"}));
  EXPECT_EQ(few.exit_code, 2);
  EXPECT_NE(few.err.find("--expert-loads has 2 values for --experts 10"), std::string::npos)
      << few.err;
  auto dense = ntp(plan_args({"--expert-loads", "1,2"}));
  EXPECT_EQ(dense.exit_code, 2);
  EXPECT_NE(dense.err.find("--expert-loads needs a MoE (--experts E)"), std::string::npos)
      << dense.err;
}

}  // namespace
}  // namespace ntp
