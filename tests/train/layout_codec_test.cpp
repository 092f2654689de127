// The published text form of a layout (train/layout_codec.h): a joiner decodes the base layout and
// must hold exactly what the members hold, slot order and units included, also when the layout is
// speed-weighted and its slots were permuted by earlier re-formations.
#include "train/layout_codec.h"

#include <gtest/gtest.h>

#include "model/gpt_model.h"
#include "model_shapes.h"
#include "shard/fold_sync_strategy.h"
#include "train/train_config.h"

namespace ntp::train {
namespace {

shard::ClusterSpec spec_of(std::vector<shard::SlotRef> failed) {
  const model::GptConfig c{.n_head = 8, .n_embd = 32, .vocab_size = 259, .ffn_unit = 4};
  shard::ClusterSpec spec;
  spec.domains = 3;
  spec.domain_size = 4;
  spec.failed = std::move(failed);
  spec.spaces = shard::model_unit_spaces(model_shape(c));
  return spec;
}

void expect_same(const shard::ClusterLayout& a, const shard::ClusterLayout& b) {
  ASSERT_EQ(a.replicas.size(), b.replicas.size());
  for (size_t d = 0; d < a.replicas.size(); ++d) {
    EXPECT_EQ(a.replicas[d].slots, b.replicas[d].slots) << "domain " << d;
    EXPECT_EQ(a.replicas[d].units, b.replicas[d].units) << "domain " << d;
  }
  EXPECT_EQ(a.spec.failed, b.spec.failed);
  EXPECT_EQ(a.spec.speeds, b.spec.speeds);
}

// A failure of slot 1:0, its repair (which may leave domain 1's ranks on permuted slots), then a
// rebalance for a slow slot 1:2: every layout of that history decodes to itself.
TEST(LayoutCodecTest, EveryLayoutOfAHistoryWithARebalanceDecodesToItself) {
  const shard::FoldSyncStrategy fold;
  auto start = shard::plan_cluster(spec_of({}), fold);
  ASSERT_TRUE(start.ok());
  auto degraded = shard::plan_cluster(spec_of({{1, 0}}), fold, &*start);
  ASSERT_TRUE(degraded.ok());
  auto repaired = shard::plan_cluster(spec_of({}), fold, &*degraded);
  ASSERT_TRUE(repaired.ok());
  shard::ClusterSpec slow = spec_of({});
  slow.speeds = {{}, {1.0, 1.0, 0.4, 1.0}, {}};
  auto rebalanced = shard::plan_cluster(slow, fold, &*repaired);
  ASSERT_TRUE(rebalanced.ok());
  ASSERT_NE(rebalanced->replicas[1].units, repaired->replicas[1].units);  // units moved
  for (const shard::ClusterLayout* layout : {&*start, &*degraded, &*repaired, &*rebalanced}) {
    auto decoded = decode_layout(encode_layout(*layout), spec_of({}), fold);
    ASSERT_TRUE(decoded.ok()) << decoded.status().to_string();
    expect_same(*decoded, *layout);
  }
}

// The same rebalance on a layout whose domain-1 slots run in a permuted order (as re-formations
// leave them): decoding follows that order, not the healthy slots' ascending one.
TEST(LayoutCodecTest, AWeightedLayoutOnPermutedSlotsDecodesToItself) {
  const shard::FoldSyncStrategy fold;
  auto base = shard::plan_cluster(spec_of({}), fold);
  ASSERT_TRUE(base.ok());
  base->replicas[1].slots = {2, 0, 3, 1};  // any order is a valid rank -> slot mapping
  shard::ClusterSpec slow = spec_of({});
  slow.speeds = {{}, {1.0, 1.0, 0.4, 1.0}, {}};
  auto rebalanced = shard::plan_cluster(slow, fold, &*base);
  ASSERT_TRUE(rebalanced.ok());
  EXPECT_EQ(rebalanced->replicas[1].slots, (std::vector<int>{2, 0, 3, 1}));
  auto decoded = decode_layout(encode_layout(*rebalanced), spec_of({}), fold);
  ASSERT_TRUE(decoded.ok()) << decoded.status().to_string();
  expect_same(*decoded, *rebalanced);
}

// A MoE shape's experts placed by load: the degraded layout (slot 1:0 failed) and a rebalance
// (slot 1:2 slow) each deal domain 1's experts by the loads, and each decodes to itself; the
// loads a decider measured travel beside the layout, read back exactly.
TEST(LayoutCodecTest, ExpertsPlacedByLoadDecodeToThemselvesAndTheMeasuredLoadsTravel) {
  shard::ClusterSpec moe;
  moe.domains = 3;
  moe.domain_size = 4;
  moe.spaces = shard::model_unit_spaces(testing::tiny_moe_shape());
  moe.unit_loads.assign(moe.spaces.size(), {});
  moe.unit_loads.back() = {9, 1, 7, 3, 5, 2, 8, 4};  // the experts space comes last
  ASSERT_EQ(moe.spaces.back().name, "experts");
  const shard::FoldSyncStrategy fold;
  auto start = shard::plan_cluster(moe, fold);
  ASSERT_TRUE(start.ok()) << start.status().to_string();
  shard::ClusterSpec lost = moe;
  lost.failed = {{1, 0}};
  auto degraded = shard::plan_cluster(lost, fold, &*start);
  ASSERT_TRUE(degraded.ok()) << degraded.status().to_string();
  shard::ClusterSpec slow = moe;
  slow.speeds = {{}, {1.0, 1.0, 0.4, 1.0}, {}};
  auto rebalanced = shard::plan_cluster(slow, fold, &*start);
  ASSERT_TRUE(rebalanced.ok()) << rebalanced.status().to_string();
  shard::ClusterSpec shape_only = moe;
  shape_only.unit_loads.clear();
  const std::vector<std::vector<double>> measured = {{}, {}, {},
                                                     {}, {}, {1.5, 0, 2, 3, 4, 5, 6, 7}};
  for (const shard::ClusterLayout* layout : {&*start, &*degraded, &*rebalanced}) {
    const std::string text = encode_layout(*layout, measured);
    auto decoded = decode_layout(text, shape_only, fold);
    ASSERT_TRUE(decoded.ok()) << decoded.status().to_string();
    expect_same(*decoded, *layout);
    EXPECT_EQ(decoded->spec.unit_loads, moe.unit_loads);
    EXPECT_EQ(published_unit_loads(text).value(), measured);
  }
  EXPECT_TRUE(published_unit_loads(encode_layout(*start)).value().empty());
  EXPECT_TRUE(published_unit_loads("").value().empty());
  EXPECT_FALSE(published_unit_loads("{not json").ok());
}

}  // namespace
}  // namespace ntp::train
