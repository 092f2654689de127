// The live recovery cost model: hand-counted reshard bytes of a tiny model, monotonicity in its
// inputs, event semantics, and that the engine charges NTP-LIVE what the model prices.
#include "sim/recovery_cost.h"

#include <gtest/gtest.h>

#include <sstream>

#include "sim/engine.h"
#include "sim_test_util.h"

namespace ntp::sim {
namespace {

// The runtime's toy job (docs/recovery.md "A real run"): 3 domains x TP 4, 2 layers, 8 heads,
// width 64, FFN 256 in units of 8, vocabulary 256, fp32 weights + two moments = 12 bytes/param.
SimConfig toy(const std::vector<std::string>& overrides = {}) {
  const std::string text = R"toml(
[model]
layers = 2
hidden = 64
heads = 8
ffn_multiplier = 4.0
ffn_unit_columns = 8
vocab = 256
sequence = 64
global_batch_tokens = 768
[parallel]
tp = 4
pp = 1
domain_size = 4
min_degree = 1
degree_multiple = 1
[system]
gpus = 12
peak_tflops = 0.001
efficiency = 0.5
hbm_gb = 16
scale_up_gbytes_per_s = 2
scale_out_gbits_per_s = 8
[failures]
rate_per_gpu_day = 0.0
warm_start = false
[recovery]
state_bytes_per_param = 12
[sim]
days = 1
trials = 1
policies = ["NTP", "NTP-LIVE"]
)toml";
  // The ops-per-member model (the toy's few members are below the control-plane curve's range);
  // control_plane_curve_test.cpp tests the curve.
  std::vector<std::string> with_model = {"recovery.control_plane=ops-model"};
  with_model.insert(with_model.end(), overrides.begin(), overrides.end());
  Result<SimConfig> c = parse_config(text, with_model, ::testing::TempDir());
  NTP_CHECK_MSG(c.ok(), c.status().to_string());
  return *c;
}

RecoveryCostModel model_of(const SimConfig& c) {
  Result<RecoveryCostModel> m = RecoveryCostModel::create(c);
  NTP_CHECK_MSG(m.ok(), m.status().to_string());
  return *m;
}

// Parameters per unit, counted by hand from the GPT-2 block (D = 64 / 8 = 8 columns per head):
// a head is 3 x (64 x 8 + 8) Q/K/V weights and biases + 8 x 64 output-projection rows = 2072 per
// layer; an FFN unit is 8 fc1 columns (64 x 8 + 8) + 8 fc2 rows (8 x 64) = 1032 per layer; a
// vocabulary row is 64.
constexpr std::int64_t kHead = 2 * 2072, kFfn = 2 * 1032, kVocabRow = 64, kBytes = 12;

TEST(RecoveryCost, UnitSpacesCountTheModelsParameters) {
  Result<std::vector<shard::UnitSpace>> spaces = stage_unit_spaces(toy());
  ASSERT_TRUE(spaces.ok()) << spaces.status().to_string();
  ASSERT_EQ(spaces->size(), 3u);
  EXPECT_EQ((*spaces)[0].units, 8);
  EXPECT_EQ((*spaces)[0].params_per_unit, kHead);
  EXPECT_EQ((*spaces)[1].units, 32);
  EXPECT_EQ((*spaces)[1].params_per_unit, kFfn);
  EXPECT_EQ((*spaces)[2].units, 256);
  EXPECT_EQ((*spaces)[2].params_per_unit, kVocabRow);
  // With pipelines the vocabulary sits in the first and last stage only: not counted.
  Result<std::vector<shard::UnitSpace>> staged = stage_unit_spaces(
      toy({"parallel.pp=3", "system.gpus=36", "model.layers=6", "parallel.min_degree=1"}));
  ASSERT_TRUE(staged.ok()) << staged.status().to_string();
  EXPECT_EQ(staged->size(), 2u);
  EXPECT_EQ((*staged)[0].params_per_unit, kHead);  // 2 of the 6 layers per stage
}

// TP 4 -> 3 in domain 0 (its slot 3 dies). Before: rank k of 4 holds heads [2k, 2k+2), FFN units
// [8k, 8k+8), vocabulary rows [64k, 64k+64). After (sync degree 3, balanced 3/3/2, 11/11/10,
// 86/85/85): rank 0 owns heads [0,3), FFN [0,11), rows [0,86) and stays on slot 0, which receives
// 1 head, 3 FFN units and 22 rows. Slot 3's units (2 heads, 8 FFN units, 64 rows) have no live copy
// in the domain: they come from DP peers. The same job run live measured 140,928 bytes into slot
// 0:0 (docs/sim.md).
TEST(RecoveryCost, Tp4To3MovesTheHandCountedBytes) {
  const RecoveryCostModel m = model_of(toy());
  std::int64_t leader = -1;
  Result<ReshardEstimate> down = m.cluster_reshard({4, 4, 4}, {3, 4, 4}, &leader);
  ASSERT_TRUE(down.ok()) << down.status().to_string();
  EXPECT_EQ(leader, (1 * kHead + 3 * kFfn + 22 * kVocabRow) * kBytes);
  EXPECT_EQ(leader, 140928);
  const std::int64_t dead_rank = (2 * kHead + 8 * kFfn + 64 * kVocabRow) * kBytes;
  EXPECT_EQ(down->dp_peer_bytes, dead_rank);
  EXPECT_GT(down->changed_group_bytes, dead_rank);
  EXPECT_GT(down->seconds, 0.0);

  // The repair: the joiner receives one degree-4 rank's units, all from the domain; slot 0 keeps
  // what it holds (the run measured 0 bytes there).
  Result<ReshardEstimate> up = m.cluster_reshard({3, 4, 4}, {4, 4, 4}, &leader);
  ASSERT_TRUE(up.ok()) << up.status().to_string();
  EXPECT_EQ(leader, 0);
  EXPECT_EQ(up->dp_peer_bytes, 0);
  EXPECT_GE(up->changed_group_bytes, dead_rank);

  // The representative cluster of the engine gives the same reshard as the whole 3-domain job.
  const ReshardEstimate g = m.group_reshard(4, 3, 4);
  EXPECT_EQ(g.dp_peer_bytes, down->dp_peer_bytes);
  EXPECT_EQ(g.changed_group_bytes, down->changed_group_bytes);
}

TEST(RecoveryCost, BreakdownAddsUpAndFollowsItsInputs) {
  const SimConfig c = toy({"recovery.detect_kill_seconds=2", "recovery.detect_hang_seconds=10",
                           "recovery.hang_fraction=0.25", "recovery.heartbeat_stale_seconds=3",
                           "recovery.agree_round_trips=4", "recovery.store_rtt_seconds=0.01",
                           "recovery.formation_seconds=0.5"});
  const RecoveryCostModel m = model_of(c);
  const RecoveryCost f = m.event(true, {{1, 4, 3}}, 4);
  EXPECT_NEAR(f.lost_step_s, m.healthy_step_s() / 2, 1e-12);
  EXPECT_NEAR(f.detect_s, 0.75 * 2 + 0.25 * 10, 1e-12);
  // The stale-heartbeat wait overlaps detection: 3 - 2 after a kill, nothing after a hang.
  EXPECT_NEAR(f.agree_s, 0.75 * 1 + 4 * 0.01, 1e-12);
  // One formation: the toy's few members are far below the store's capacity.
  EXPECT_EQ(f.rebuild_s, 0.5);
  EXPECT_NEAR(f.total_s, f.lost_step_s + f.detect_s + f.agree_s + f.rebuild_s + f.reshard_s, 1e-12);
  // A repair: no lost step, no detection, no stale wait.
  const RecoveryCost r = m.event(false, {{1, 3, 4}}, 4);
  EXPECT_EQ(r.lost_step_s, 0.0);
  EXPECT_EQ(r.detect_s, 0.0);
  EXPECT_NEAR(r.agree_s, 0.04, 1e-12);
  EXPECT_GT(r.reshard_s, 0.0);
}

// The control plane's store load (bench/elastic/control_plane_bench): a phase lasts at least its
// store operations over the store's capacity, members being the cluster's GPUs. The toy's 12
// members cost microseconds (round trips and the formation's latency dominate); with capacity
// 10 ops/s they dominate.
TEST(RecoveryCost, TheStoresCapacityBoundsTheNoticeTheAgreementAndTheFormation) {
  const std::vector<std::string> base = {
      "recovery.detect_kill_seconds=0.5", "recovery.detect_hang_seconds=1",
      "recovery.hang_fraction=0",         "recovery.heartbeat_stale_seconds=0",
      "recovery.agree_round_trips=4",     "recovery.store_rtt_seconds=0.01",
      "recovery.formation_seconds=0.05"};
  const RecoveryCost fast = model_of(toy(base)).event(true, {{1, 4, 3}}, 4);
  EXPECT_NEAR(fast.detect_s, 0.5, 1e-12);
  EXPECT_NEAR(fast.agree_s, 0.04, 1e-12);
  EXPECT_EQ(fast.rebuild_s, 0.05);
  std::vector<std::string> slow = base;
  slow.insert(slow.end(), {"recovery.store_ops_per_s=10", "recovery.notice_store_ops_per_member=2",
                           "recovery.agree_store_ops_per_member=3",
                           "recovery.formation_store_ops_per_member=5"});
  const RecoveryCost bound = model_of(toy(slow)).event(true, {{1, 4, 3}}, 4);
  EXPECT_NEAR(bound.detect_s, 2.0 * 12 / 10, 1e-12);  // 12 members x 2 ops at 10 ops/s
  EXPECT_NEAR(bound.agree_s, 3.0 * 12 / 10, 1e-12);
  EXPECT_NEAR(bound.rebuild_s, 5.0 * 12 / 10, 1e-12);
}

TEST(RecoveryCost, EventsThatLeaveTheRunningJobAloneCostNothing) {
  const RecoveryCostModel m = model_of(toy());
  EXPECT_EQ(m.event(false, {{0, 3, 3}}, 4).total_s, 0.0);  // repair, degree unchanged
  EXPECT_EQ(m.event(true, {{0, 0, 0}}, 4).total_s, 0.0);   // a group that was not running
  EXPECT_EQ(m.event(true, {}, 4).total_s, 0.0);
  // A failure that keeps the degree (a spare GPU of the group takes over) still re-forms the job
  // and fetches one rank's units from DP peers.
  const RecoveryCost same = m.event(true, {{0, 3, 3}}, 4);
  EXPECT_GT(same.total_s, 0.0);
  EXPECT_EQ(same.dp_peer_bytes, (3 * kHead + 11 * kFfn + 86 * kVocabRow) * kBytes);
  // A replica that comes back from degree 0 fetches its whole stage from DP peers.
  const RecoveryCost back = m.event(false, {{0, 0, 4}}, 4);
  EXPECT_EQ(back.changed_group_bytes, (8 * kHead + 32 * kFfn + 256 * kVocabRow) * kBytes);
}

TEST(RecoveryCost, MoreBandwidthCostsLessAndALargerModelMore) {
  double previous = 1e300;
  for (const char* gbytes : {"0.5", "2", "8", "32"}) {
    const RecoveryCostModel m =
        model_of(toy({std::string("recovery.reshard_gbytes_per_s=") + gbytes,
                      std::string("system.scale_out_gbits_per_s=") + gbytes}));
    const double s = m.group_reshard(4, 3, 4).seconds;
    EXPECT_LT(s, previous) << gbytes;
    previous = s;
  }
  std::int64_t bytes = 0;
  double seconds = 0;
  for (const char* layers : {"2", "4", "8"}) {
    const RecoveryCostModel m = model_of(toy({std::string("model.layers=") + layers}));
    const ReshardEstimate e = m.group_reshard(4, 3, 4);
    EXPECT_GT(e.changed_group_bytes, bytes) << layers;
    EXPECT_GT(e.seconds, seconds) << layers;
    bytes = e.changed_group_bytes;
    seconds = e.seconds;
  }
  // Twice the width (4x the parameters per unit) moves more too.
  const RecoveryCostModel wide = model_of(toy({"model.hidden=128"}));
  EXPECT_GT(wide.group_reshard(4, 3, 4).changed_group_bytes,
            model_of(toy()).group_reshard(4, 3, 4).changed_group_bytes);
}

// A config that the cost model prices for NTP-LIVE (no fixed live_recovery_seconds), failures
// from a trace: GPU 5 (domain 1) fails at 2 h and is repaired 5 h later.
SimConfig traced(const std::vector<std::string>& extra = {}) {
  std::vector<std::string> o = {"failures.trace=\"" +
                                testing::write_temp("live.csv",
                                                    "hours,gpu,kind,repair_hours\n"
                                                    "2,5,hardware,5\n") +
                                "\""};
  o.insert(o.end(), extra.begin(), extra.end());
  return toy(o);
}

TrialResult run(const SimConfig& c) {
  Result<Simulator> s = Simulator::create(c);
  NTP_CHECK_MSG(s.ok(), s.status().to_string());
  return s->run_trial(0, false);
}

TEST(RecoveryCost, EngineChargesNtpLiveWhatTheModelPrices) {
  const SimConfig c = traced();
  const TrialResult r = run(c);
  const RecoveryCostModel m = model_of(c);
  const double failure = m.event(true, {{1, 4, 3}}, 4).total_s;
  const double repair = m.event(false, {{1, 3, 4}}, 4).total_s;
  EXPECT_EQ(r.live_recovery.failures, 1);
  EXPECT_EQ(r.live_recovery.repairs, 1);
  EXPECT_NEAR(r.live_recovery.sum.total_s, failure + repair, 1e-12);
  EXPECT_NEAR(r.policies[1].down_hours * 3600, failure + repair, 1e-9);
  // NTP reconfigures through a job restart instead (restart_minutes = 10).
  EXPECT_NEAR(r.policies[0].down_hours, 10.0 / 60, 1e-12);
}

TEST(RecoveryCost, NtpLiveGoodputRespondsToTheInputs) {
  auto goodput = [](const std::vector<std::string>& o) {
    return run(traced(o)).policies[1].goodput;
  };
  const double base = goodput({});
  EXPECT_LT(goodput({"recovery.formation_seconds=30"}), base);
  EXPECT_LT(goodput({"recovery.hang_fraction=1", "recovery.detect_hang_seconds=600"}), base);
  // A slow link makes the reshard dominate; a faster one buys goodput back.
  const double slow =
      goodput({"recovery.reshard_gbytes_per_s=1e-5", "system.scale_out_gbits_per_s=1e-4"});
  const double fast =
      goodput({"recovery.reshard_gbytes_per_s=1e-3", "system.scale_out_gbits_per_s=1e-2"});
  EXPECT_LT(slow, fast);
  EXPECT_LT(slow, base);
  // A fixed live_recovery_seconds replaces the model.
  const TrialResult fixed = run(traced({"recovery.live_recovery_seconds=7"}));
  EXPECT_NEAR(fixed.policies[1].down_hours * 3600, 14.0, 1e-9);
  EXPECT_EQ(fixed.live_recovery.failures, 0);
}

TEST(RecoveryCost, BadModelShapesAreRejectedNamingTheKey) {
  Result<SimConfig> c = parse_config("[model]\nhidden = 100\nheads = 8\n", {});
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("model.hidden"), std::string::npos) << c.status().to_string();
}

}  // namespace
}  // namespace ntp::sim
