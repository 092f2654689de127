// What the trainer's gradient synchronization relies on from the model: the [outer, units, inner]
// unit view of every sharded tensor (model/param.h), the loss scale of BackwardOptions, and the
// grads-ready callback (each parameter reported once, after its last gradient write).
#include <gtest/gtest.h>

#include <set>

#include "core/rng.h"
#include "model/gpt_model.h"
#include "model/tp_shard.h"
#include "random_inputs.h"

namespace ntp::model {
namespace {

GptConfig hook_config() {
  return {.n_layer = 3, .n_head = 4, .n_embd = 16, .n_ctx = 8, .vocab_size = 30, .ffn_unit = 4};
}

void random_batch(int64_t n, std::vector<int32_t>& tokens, std::vector<int32_t>& targets) {
  Rng rng(5);
  testdata::random_batch(rng, n, 30, tokens, targets);
}

// Local element (o, k, i) of a sharded tensor is logical element (o, unit_ids[k], i) of the
// logical [outer, units, inner] view, for a shuffled (non-contiguous, unordered) shard.
TEST(UnitViewTest, LocalSlabsAreTheShardsUnitsInShardOrder) {
  const GptConfig c = hook_config();
  const TpShard shard = shuffled_layout(c, 3, 7)[1];
  auto model = GptModel::create(c, shard, 1);
  ASSERT_TRUE(model.ok());
  int sharded = 0;
  for (const Param& p : model->params()) {
    if (p.replicated()) {
      EXPECT_EQ(p.space, UnitSpaceId::kNone) << p.name;
      continue;
    }
    ++sharded;
    const std::vector<int64_t>& ids = p.space == UnitSpaceId::kHeads ? shard.heads
                                      : p.space == UnitSpaceId::kFfn ? shard.ffn_units
                                                                     : shard.vocab_rows;
    const int64_t units = p.space == UnitSpaceId::kHeads ? c.n_head
                          : p.space == UnitSpaceId::kFfn ? c.ffn_units()
                                                         : c.vocab_size;
    ASSERT_EQ(p.unit_outer * units * p.unit_inner, shape_numel(p.logical_shape)) << p.name;
    ASSERT_EQ(p.local_units(), static_cast<int64_t>(ids.size())) << p.name;
    for (int64_t o = 0; o < p.unit_outer; ++o) {
      for (int64_t k = 0; k < p.local_units(); ++k) {
        for (int64_t i = 0; i < p.unit_inner; ++i) {
          const int64_t local = (o * p.local_units() + k) * p.unit_inner + i;
          const int64_t logical = (o * units + ids[static_cast<size_t>(k)]) * p.unit_inner + i;
          ASSERT_EQ(p.logical_offset(local), logical) << p.name << " " << o << "," << k << "," << i;
        }
      }
    }
  }
  EXPECT_EQ(sharded, 1 + 6 * static_cast<int>(c.n_layer));  // wte + 6 per block
}

TEST(BackwardHookTest, EveryParamIsReportedOnceAfterItsLastGradientWrite) {
  const GptConfig c = hook_config();
  auto model = GptModel::create(c, full_shard(c), 3);
  ASSERT_TRUE(model.ok());
  std::vector<int32_t> tokens, targets;
  random_batch(2 * 8, tokens, targets);

  // Reference gradients of a plain call.
  ASSERT_TRUE(model->forward_backward(tokens, targets, 2, 8).ok());
  std::vector<std::vector<float>> expected;
  for (const Param& p : model->params())
    expected.emplace_back(p.grad.span().begin(), p.grad.span().end());
  model->zero_grad();

  // Snapshot each gradient when it is reported: it must already be final.
  std::vector<int> order;
  std::vector<std::vector<float>> at_report(model->params().size());
  BackwardOptions options;
  options.on_grads_ready = [&](std::span<const int> ready) {
    for (int i : ready) {
      order.push_back(i);
      const Param& p = model->params()[static_cast<size_t>(i)];
      at_report[static_cast<size_t>(i)].assign(p.grad.span().begin(), p.grad.span().end());
    }
  };
  ASSERT_TRUE(model->forward_backward(tokens, targets, 2, 8, options).ok());
  ASSERT_EQ(order.size(), model->params().size());
  EXPECT_EQ(std::set<int>(order.begin(), order.end()).size(), order.size());
  for (size_t i = 0; i < expected.size(); ++i) {
    EXPECT_EQ(at_report[i], expected[i]) << model->params()[i].name;
  }
  // The calls follow grads_ready_order(): blocks last-to-first, the embedding last.
  std::vector<int> planned;
  for (const std::vector<int>& group : model->grads_ready_order()) {
    planned.insert(planned.end(), group.begin(), group.end());
  }
  EXPECT_EQ(order, planned);
  EXPECT_EQ(model->params()[static_cast<size_t>(order.front())].name, "transformer.ln_f.weight");
  EXPECT_EQ(model->params()[static_cast<size_t>(order[2])].name, "transformer.h.2.ln_1.weight");
  EXPECT_EQ(model->params()[static_cast<size_t>(order.back())].name, "transformer.wpe.weight");
}

TEST(BackwardHookTest, LossScaleScalesEveryGradientAndNotTheLoss) {
  const GptConfig c = hook_config();
  auto model = GptModel::create(c, full_shard(c), 3);
  ASSERT_TRUE(model.ok());
  std::vector<int32_t> tokens, targets;
  random_batch(8, tokens, targets);
  auto plain = model->forward_backward(tokens, targets, 1, 8);
  ASSERT_TRUE(plain.ok());
  std::vector<std::vector<float>> once;
  for (const Param& p : model->params())
    once.emplace_back(p.grad.span().begin(), p.grad.span().end());
  model->zero_grad();
  BackwardOptions options;
  options.loss_scale = 0.25f;  // a power of two: scaled gradients are exact
  auto scaled = model->forward_backward(tokens, targets, 1, 8, options);
  ASSERT_TRUE(scaled.ok());
  EXPECT_EQ(*plain, *scaled);
  for (size_t i = 0; i < once.size(); ++i) {
    const Param& p = model->params()[i];
    for (int64_t e = 0; e < p.grad.numel(); ++e) {
      ASSERT_EQ(p.grad[e], 0.25f * once[i][static_cast<size_t>(e)]) << p.name << " " << e;
    }
  }
}

}  // namespace
}  // namespace ntp::model
