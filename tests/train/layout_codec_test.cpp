// The published text form of a layout (train/layout_codec.h): a joiner decodes the base layout and
// must hold exactly what the members hold, slot order and units included, also when the layout is
// speed-weighted and its slots were permuted by earlier re-formations.
#include "train/layout_codec.h"

#include <gtest/gtest.h>

#include "model/gpt_model.h"
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

}  // namespace
}  // namespace ntp::train
