// Unit blocks against a naive element-by-element model of the same layouts.
#include "train/unit_blocks.h"

#include <gtest/gtest.h>

#include "core/rng.h"
#include "model/gpt_model.h"

namespace ntp::train {
namespace {

shard::IntervalSet random_set(Rng& rng, int64_t universe) {
  std::vector<int64_t> ids;
  for (int64_t u = 0; u < universe; ++u) {
    if (rng.below(3) != 0) ids.push_back(u);
  }
  return shard::IntervalSet::from_ids(ids);
}

// Value stored for (outer o, unit u, inner i): unique, so any misplaced copy shows.
float tag(int64_t o, int64_t u, int64_t i) { return static_cast<float>(o * 100000 + u * 100 + i); }

TEST(UnitBlocksTest, CopySharedUnitsMovesExactlyTheCommonUnitsToTheirPlaces) {
  Rng rng(11);
  for (int trial = 0; trial < 200; ++trial) {
    ParamGeometry g;
    g.outer = 1 + static_cast<int64_t>(rng.below(4));
    g.inner = 1 + static_cast<int64_t>(rng.below(5));
    g.units = 1 + static_cast<int64_t>(rng.below(40));
    BlockLayout from_layout, to_layout;
    from_layout.add(0, random_set(rng, g.units), g);
    to_layout.add(7, random_set(rng, g.units), g);  // a first block: offsets must be honoured
    to_layout.add(0, random_set(rng, g.units), g);
    if (from_layout.empty() || to_layout.blocks().size() < 2) continue;
    const Block& from = from_layout.blocks()[0];
    const Block& to = to_layout.blocks()[1];
    std::vector<float> src(static_cast<size_t>(from_layout.size()));
    const std::vector<int64_t> from_ids = from.units.ids();
    for (int64_t o = 0; o < g.outer; ++o) {
      for (size_t k = 0; k < from_ids.size(); ++k) {
        for (int64_t i = 0; i < g.inner; ++i) {
          src[static_cast<size_t>(
              (o * static_cast<int64_t>(from_ids.size()) + static_cast<int64_t>(k)) * g.inner +
              i)] = tag(o, from_ids[k], i);
        }
      }
    }
    std::vector<float> dst(static_cast<size_t>(to_layout.size()), -1.0f);
    const int64_t copied = copy_shared_units(g, from, src.data(), to, dst.data());
    const std::vector<int64_t> to_ids = to.units.ids();
    int64_t expected = 0;
    for (int64_t o = 0; o < g.outer; ++o) {
      for (size_t k = 0; k < to_ids.size(); ++k) {
        const bool shared = from.units.contains(to_ids[k]);
        for (int64_t i = 0; i < g.inner; ++i) {
          const float v = dst[static_cast<size_t>(
              to.offset +
              (o * static_cast<int64_t>(to_ids.size()) + static_cast<int64_t>(k)) * g.inner + i)];
          ASSERT_EQ(v, shared ? tag(o, to_ids[k], i) : -1.0f) << trial;
          expected += shared ? 1 : 0;
        }
      }
    }
    EXPECT_EQ(copied, expected);
    for (int64_t e = 0; e < to.offset; ++e) ASSERT_EQ(dst[static_cast<size_t>(e)], -1.0f);
  }
}

TEST(UnitBlocksTest, TakePositionsSlicesTheSetInOrder) {
  const shard::IntervalSet s = shard::IntervalSet::from_ids({1, 2, 3, 7, 9, 10, 11});
  EXPECT_EQ(take_positions(s, 0, 3), shard::IntervalSet::range(1, 4));
  EXPECT_EQ(take_positions(s, 2, 5), shard::IntervalSet::from_ids({3, 7, 9}));
  EXPECT_EQ(take_positions(s, 6, 7), shard::IntervalSet::range(11, 12));
  EXPECT_TRUE(take_positions(s, 4, 4).empty());
}

// slice_ids of a rank's own units is exactly the model's logical_index: the block view and the
// model's storage agree on every tensor.
TEST(UnitBlocksTest, SliceIdsOfOwnUnitsAreTheModelsLogicalIndex) {
  const model::GptConfig c{
      .n_layer = 2, .n_head = 6, .n_embd = 24, .vocab_size = 40, .ffn_unit = 3};
  const std::vector<model::TpShard> layout = model::contiguous_layout(c, 4);
  for (const model::TpShard& shard : layout) {
    auto m = model::GptModel::create(c, shard, 1);
    ASSERT_TRUE(m.ok());
    for (const model::Param& p : m->params()) {
      const ParamGeometry g = ParamGeometry::of(p);
      if (p.replicated()) {
        std::vector<int64_t> rows(static_cast<size_t>(p.logical_shape[0]));
        for (size_t r = 0; r < rows.size(); ++r) rows[r] = static_cast<int64_t>(r);
        EXPECT_EQ(slice_ids(p, g, shard::IntervalSet::range(0, g.units)), rows) << p.name;
        continue;
      }
      const std::vector<int64_t>& ids = p.space == model::UnitSpaceId::kHeads ? shard.heads
                                        : p.space == model::UnitSpaceId::kFfn ? shard.ffn_units
                                                                              : shard.vocab_rows;
      EXPECT_EQ(slice_ids(p, g, shard::IntervalSet::from_ids(ids)), p.logical_index) << p.name;
    }
  }
}

}  // namespace
}  // namespace ntp::train
