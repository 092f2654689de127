#include "sim/workload.h"

#include <gtest/gtest.h>

#include <cmath>

#include "sim_test_util.h"

namespace ntp::sim {
namespace {

TEST(Workload, DegreeAfterFailuresRoundsAndRespectsMinimum) {
  SimConfig c = testing::small_config(1, {"parallel.tp=8", "parallel.domain_size=8",
                                          "parallel.min_degree=4", "parallel.degree_multiple=2"});
  const Workload w(c);
  EXPECT_EQ(w.degree_after_failures(0), 8);
  EXPECT_EQ(w.degree_after_failures(1), 6);  // 7 healthy, rounded down to a multiple of 2
  EXPECT_EQ(w.degree_after_failures(2), 6);
  EXPECT_EQ(w.degree_after_failures(4), 4);
  EXPECT_EQ(w.degree_after_failures(5), 0);  // 3 < min_degree: cannot run
}

// With the FFN negligible and TP communication free, a stage's compute is set by the rank with
// the most heads: speed(t) = ceil(heads / tp) / ceil(heads / t), computed here without the model.
TEST(Workload, SpeedFollowsHeadGranularity) {
  SimConfig c = testing::small_config(
      1, {"model.heads=12", "model.ffn_multiplier=0.001", "parallel.tp=8", "parallel.domain_size=8",
          "parallel.min_degree=1", "model.sequence=1", "model.global_batch_tokens=8"});
  c.parallel.tp_overlap = 1.0;
  const Workload w(c);
  auto ceil_div = [](int a, int b) { return (a + b - 1) / b; };
  for (int t = 1; t <= 8; ++t) {
    const double expected = static_cast<double>(ceil_div(12, 8)) / ceil_div(12, t);
    EXPECT_NEAR(w.speed(t), expected, 2e-3) << t;
  }
  // 12 heads at degree 7 or 6 cost the same (2 heads on the busiest rank).
  EXPECT_NEAR(w.speed(7), w.speed(6), 2e-3);
}

TEST(Workload, SpeedIsOneAtFullDegreeAndFallsWithDegree) {
  Result<SimConfig> c =
      load_config(std::string(NTP_SOURCE_DIR) + "/configs/sim/paper-b200-nvl32.toml");
  ASSERT_TRUE(c.ok());
  const Workload w(*c);
  EXPECT_DOUBLE_EQ(w.speed(32), 1.0);
  for (int t = 28; t < 32; ++t) EXPECT_LT(w.speed(t), w.speed(t + 1));
  // Compute alone can never beat the ideal t / 32 scaling.
  for (int t = 28; t < 32; ++t) EXPECT_LE(w.speed(t), t / 32.0 + 1e-12);
}

TEST(Workload, NtpReducesDpAtTheSmallestDegree) {
  // A slow network and no overlap make the DP reduction visible: at t_min the per-GPU gradient
  // share is 1/t_min, so the exposed time grows by tp / t_min (plus the fold/unfold).
  SimConfig c =
      testing::small_config(1, {"parallel.dp_overlap=0.0", "system.scale_out_gbits_per_s=0.001"});
  const Workload w(c);
  const StepBreakdown full = w.step(4, 4), reduced = w.step(4, 2);
  EXPECT_NEAR(reduced.dp_s / full.dp_s, 2.0, 0.01);
  EXPECT_LT(w.dp_factor(2), 1.0);
  EXPECT_DOUBLE_EQ(w.dp_factor(4), 1.0);
}

TEST(Workload, MemoryScalesInverselyWithDegree) {
  SimConfig c = testing::small_config();
  const Workload w(c);
  EXPECT_NEAR(w.memory_bytes(2) / w.memory_bytes(4), 2.0, 1e-12);
  // Parameters: layers x (4 h^2 + 2 h f) = 4 x (4 + 8) x 256^2.
  EXPECT_DOUBLE_EQ(w.stage_params(), 4.0 * 12.0 * 256 * 256);
}

// A MoE of one expert, top 1, as wide as the dense FFN, split by columns, is the dense model:
// the same step, parameters and speeds, exactly.
TEST(Workload, OneExpertSplitByColumnsIsTheDenseModel) {
  const SimConfig dense = testing::small_config();
  const SimConfig moe = testing::small_config(
      1, {"model.experts=1", "model.top_k=1", "model.expert_ffn_multiplier=4.0",
          "model.expert_split=\"columns\""});
  const Workload a(dense), b(moe);
  EXPECT_EQ(b.stage_params(), a.stage_params());
  EXPECT_EQ(b.step(4, 4).total_s, a.step(4, 4).total_s);
  for (int t = 1; t <= 4; ++t) EXPECT_EQ(b.speed(t), a.speed(t)) << t;
}

// Whole experts (expert parallelism): the busiest GPU of a group at degree t holds ceil(E / t)
// experts and runs their share of every token's top_k expert FLOPs; the all-to-all moves each
// token's hidden state to its top_k experts and back, forward and backward. Computed here from
// the formulas of docs/sim.md without the model: 12 experts of width h, top 2, a sequence of one
// token; compute with TP communication hidden, then TP communication on a slow link.
TEST(Workload, WholeExpertsCostTheBusiestGpusExpertsAndAnAllToAll) {
  const std::vector<std::string> moe = {
      "model.experts=12",        "model.top_k=2",          "model.expert_ffn_multiplier=1.0",
      "model.heads=8",           "model.sequence=1",       "model.global_batch_tokens=16",
      "parallel.tp=8",           "parallel.domain_size=8", "parallel.min_degree=1",
      "system.peak_tflops=1e-6", "system.efficiency=1.0"};
  SimConfig c = testing::small_config(1, moe);
  c.parallel.tp_overlap = 1.0;  // compute only
  const Workload w(c);
  // tokens per replica: 16 / (64 GPUs / 8) = 2; layers 4; h = 256.
  const double h = 256, tokens = 2, layers = 4, rate = 1e-6 * 1e12;
  auto ceil_div = [](int a, int b) { return (a + b - 1) / b; };
  for (int t = 1; t <= 8; ++t) {
    const double heads = 8 * h * h + 2 * 1 * h;  // F_head, sequence 1
    const double experts = 4 * h * 2 * h;        // top 2 experts of h columns
    const double flops =
        tokens * layers * 3 * (heads * ceil_div(8, t) / 8.0 + experts * ceil_div(12, t) / 12.0);
    EXPECT_NEAR(w.step(t, t).compute_s, flops / rate, 1e-9 * flops / rate) << t;
  }
  // 12 experts at degree 7 or 6: 2 on the busiest GPU either way (8 heads: 2 either way too).
  EXPECT_NEAR(w.step(6, 6).compute_s, w.step(7, 7).compute_s, 1e-12);
  SimConfig comm = testing::small_config(1, moe);
  comm.system.scale_up_gbytes_per_s = 1.0;  // 1 GB/s: the TP traffic dominates
  const Workload wc(comm);
  for (int t = 2; t <= 8; ++t) {
    // bf16: attention's all-reduce forward and backward, 2 x 2h (t-1)/t elements; the all-to-all:
    // 4 transfers (dispatch, combine; forward, backward) of top_k h elements, (t-1)/t remote.
    const double elements = (2 * 2 * h + 4 * 2 * h) * (t - 1.0) / t;
    const double bytes = tokens * layers * 2 * elements;
    EXPECT_NEAR(wc.step(t, t).tp_comm_s, bytes / 1e9, 1e-12 * bytes) << t;
  }
  // Parameters: layers x (4 h^2 + 12 experts x 2 h^2).
  EXPECT_DOUBLE_EQ(w.stage_params(), 4.0 * (4.0 + 24.0) * 256 * 256);
}

}  // namespace
}  // namespace ntp::sim
