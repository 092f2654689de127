// Single-process model tests: configuration and layout validation, the logical <-> local
// parameter map, layout-independent initialization, and a whole-model gradient check against
// finite differences (the ops are checked one by one in tests/kernels).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <set>
#include <span>
#include <vector>

#include "core/rng.h"
#include "model/gpt_model.h"
#include "model/init.h"
#include "model/tp_shard.h"
#include "model_shapes.h"
#include "random_inputs.h"

namespace ntp::model {
namespace {

GptConfig tiny_config() { return testing::tiny_gpt(/*vocab_size=*/20); }

TEST(GptConfigTest, ValidatesSizes) {
  EXPECT_TRUE(tiny_config().validate().ok());
  GptConfig c = tiny_config();
  c.n_head = 3;
  EXPECT_EQ(c.validate().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(c.validate().message().find("n_head = 3"), std::string::npos);
  c = tiny_config();
  c.ffn_unit = 5;
  EXPECT_EQ(c.validate().code(), StatusCode::kInvalidArgument);
  c = tiny_config();
  c.n_layer = 0;
  EXPECT_EQ(c.validate().code(), StatusCode::kInvalidArgument);
}

TEST(TpShardTest, LayoutsCoverEveryUnitOnceAndShuffledIsNotContiguous) {
  const GptConfig c = tiny_config();
  for (int degree : {1, 2, 3, 5}) {
    EXPECT_TRUE(validate_layout(c, contiguous_layout(c, degree)).ok()) << degree;
    const std::vector<TpShard> shuffled = shuffled_layout(c, degree, 42);
    EXPECT_TRUE(validate_layout(c, shuffled).ok()) << degree;
    for (const TpShard& s : shuffled) {
      EXPECT_LE(s.vocab_rows.size(), (20u + degree - 1) / degree);
      EXPECT_GE(s.vocab_rows.size(), 20u / degree);
    }
  }
  const std::vector<TpShard> s3 = shuffled_layout(c, 3, 42);
  bool gap = false;
  for (size_t i = 1; i < s3[0].vocab_rows.size(); ++i) {
    gap |= s3[0].vocab_rows[i] != s3[0].vocab_rows[i - 1] + 1;
  }
  EXPECT_TRUE(gap);

  std::vector<TpShard> bad = contiguous_layout(c, 2);
  bad[1].heads.push_back(bad[0].heads[0]);
  EXPECT_EQ(validate_layout(c, bad).code(), StatusCode::kInvalidArgument);
  bad = contiguous_layout(c, 2);
  bad[1].ffn_units.pop_back();
  EXPECT_NE(validate_layout(c, bad).message().find("assigned to no rank"), std::string::npos);
  TpShard out_of_range = full_shard(c);
  out_of_range.vocab_rows.push_back(20);
  EXPECT_EQ(GptModel::create(c, out_of_range, 1).status().code(), StatusCode::kInvalidArgument);
}

TEST(ParamTest, LogicalOffsetsFollowTheShardAxis) {
  Param p;
  p.logical_shape = {3, 5};
  p.shard_axis = 1;
  p.logical_index = {4, 1};
  EXPECT_EQ(p.local_shape(), (std::vector<int64_t>{3, 2}));
  // local (row 2, col 0) -> logical (2, 4) = 14; local (1, 1) -> logical (1, 1) = 6.
  EXPECT_EQ(p.logical_offset(4), 14);
  EXPECT_EQ(p.logical_offset(3), 6);
  p.shard_axis = 0;
  p.logical_index = {2};
  EXPECT_EQ(p.logical_offset(3), 13);
  std::vector<float> logical(15, -1.0f), local = {1, 2, 3, 4, 5};
  p.scatter_to_logical(local, logical);
  for (int j = 0; j < 5; ++j)
    EXPECT_EQ(logical[static_cast<size_t>(10 + j)], local[static_cast<size_t>(j)]);
  EXPECT_EQ(logical[0], -1.0f);
  std::vector<float> back(5);
  p.gather_from_logical(logical, back);
  EXPECT_EQ(back, local);
}

// Logical tensor of every parameter assembled from the shards of a layout.
std::vector<std::vector<float>> assemble(std::vector<GptModel>& ranks, bool grads) {
  std::vector<std::vector<float>> out;
  for (size_t i = 0; i < ranks[0].params().size(); ++i) {
    const Param& first = ranks[0].params()[i];
    std::vector<float> logical(static_cast<size_t>(shape_numel(first.logical_shape)), NAN);
    for (GptModel& m : ranks) {
      const Param& p = m.params()[i];
      p.scatter_to_logical((grads ? p.grad : p.value).span(), logical);
      if (p.replicated()) break;
    }
    out.push_back(std::move(logical));
  }
  return out;
}

TEST(InitTest, LogicalWeightsDoNotDependOnTheLayout) {
  const GptConfig c = tiny_config();
  std::vector<GptModel> whole;
  whole.push_back(std::move(GptModel::create(c, full_shard(c), 7).value()));
  std::vector<GptModel> sharded;
  for (const TpShard& s : shuffled_layout(c, 3, 9)) {
    sharded.push_back(std::move(GptModel::create(c, s, 7).value()));
  }
  const auto a = assemble(whole, false), b = assemble(sharded, false);
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i], b[i]) << whole[0].params()[i].name;  // bit-identical, no NaN holes
  }
  // A different seed gives different weights.
  auto other = GptModel::create(c, full_shard(c), 8);
  EXPECT_NE(other->params()[0].value.span()[0], whole[0].params()[0].value.span()[0]);
}

TEST(InitTest, FollowsTheGpt2Scheme) {
  GptConfig c = tiny_config();
  c.n_embd = 64;
  c.vocab_size = 256;
  auto m = GptModel::create(c, full_shard(c), 3);
  ASSERT_TRUE(m.ok());
  EXPECT_EQ(m->params().size(), static_cast<size_t>(4 + 12 * c.n_layer));
  int64_t total = 0;
  for (const Param& p : m->params()) total += p.value.numel();
  EXPECT_EQ(total, c.num_params());
  auto stddev = [](const Param& p) {
    double s = 0.0, s2 = 0.0;
    for (float v : p.value.span()) s += v, s2 += static_cast<double>(v) * v;
    const double n = static_cast<double>(p.value.numel());
    return std::sqrt(s2 / n - (s / n) * (s / n));
  };
  EXPECT_NEAR(stddev(*m->find("transformer.wte.weight")), 0.02, 0.001);
  EXPECT_NEAR(stddev(*m->find("transformer.h.0.attn.c_proj.weight")), 0.02 / 2.0, 0.0007);
  for (float v : m->find("transformer.h.1.ln_2.weight")->value.span()) EXPECT_EQ(v, 1.0f);
  for (float v : m->find("transformer.h.1.mlp.c_fc.bias")->value.span()) EXPECT_EQ(v, 0.0f);
  ASSERT_NE(m->find("transformer.h.1.attn.c_attn.weight"), nullptr);
  EXPECT_EQ(m->find("transformer.h.1.attn.c_attn.weight")->logical_shape,
            (std::vector<int64_t>{64, 192}));
  EXPECT_EQ(m->find("lm_head.weight"), nullptr);  // tied to wte
}

TEST(GptModelTest, RejectsBadBatches) {
  const GptConfig c = tiny_config();
  auto m = GptModel::create(c, full_shard(c), 1);
  std::vector<int32_t> ids(2 * 9, 1);
  EXPECT_EQ(m->forward_backward(ids, ids, 2, 9).status().code(), StatusCode::kInvalidArgument);
  std::vector<int32_t> bad(2 * 4, 1);
  bad[3] = 20;
  EXPECT_EQ(m->forward_backward(bad, bad, 2, 4).status().code(), StatusCode::kInvalidArgument);
}

// Random tokens and targets over the tiny vocabulary.
void random_batch(Rng& rng, int64_t b, int64_t t, std::vector<int32_t>* tokens,
                  std::vector<int32_t>* targets) {
  testdata::random_batch(rng, b * t, 20, *tokens, *targets);
}

TEST(GptModelTest, LossIsTheMeanCrossEntropyOverTokens) {
  GptConfig c = tiny_config();
  auto created = GptModel::create(c, full_shard(c), 11);
  ASSERT_TRUE(created.ok());
  GptModel& m = *created;
  Rng rng(7);
  for (Param& p : m.params()) {
    for (float& v : p.value.span()) v += static_cast<float>(rng.normal() * 0.1);
  }
  const int64_t b = 2, t = 8;
  std::vector<int32_t> tokens, targets;
  random_batch(rng, b, t, &tokens, &targets);
  // The loss is the mean over all b x t tokens: the mean of the two sequences' own losses.
  const double both = m.loss(tokens, targets, b, t).value();
  const std::span<const int32_t> all_tokens(tokens), all_targets(targets);
  const double first = m.loss(all_tokens.first(t), all_targets.first(t), 1, t).value();
  const double second = m.loss(all_tokens.last(t), all_targets.last(t), 1, t).value();
  EXPECT_NEAR(both, (first + second) / 2, 1e-5);
  EXPECT_GT(std::abs(first - second), 1e-3) << "the two halves must differ for this to test";
  // The output layer is tied to wte: with wte = 0 every logit is 0, whatever the other weights
  // are, so the cross-entropy is exactly log(vocab).
  for (float& v : m.find("transformer.wte.weight")->value.span()) v = 0.0F;
  EXPECT_NEAR(m.loss(tokens, targets, b, t).value(), std::log(20.0), 1e-5);
  m.zero_grad();
  EXPECT_NEAR(m.forward_backward(tokens, targets, b, t).value(), std::log(20.0), 1e-5);
}

TEST(GptModelTest, InitialLossIsNearUniformAndGradientsMatchFiniteDifferences) {
  GptConfig c = tiny_config();
  auto created = GptModel::create(c, full_shard(c), 11);
  ASSERT_TRUE(created.ok());
  GptModel& m = *created;
  const int64_t b = 2, t = 8;
  Rng rng(5);
  std::vector<int32_t> tokens, targets;
  random_batch(rng, b, t, &tokens, &targets);
  // GPT-2 initialization (std 0.02) gives near-zero logits: the loss is log(vocab) to within the
  // few hundredths the small logits move it (0.03 here; the exact check is the test above).
  EXPECT_NEAR(m.loss(tokens, targets, b, t).value(), std::log(20.0), 0.1);

  // Perturb the initial weights so every parameter matters (LayerNorm gains != 1, biases != 0).
  for (Param& p : m.params()) {
    for (float& v : p.value.span()) v += static_cast<float>(rng.normal() * 0.1);
  }
  m.zero_grad();
  const double loss = m.forward_backward(tokens, targets, b, t).value();
  EXPECT_DOUBLE_EQ(m.loss(tokens, targets, b, t).value(), loss);  // forward-only agrees

  // Every tensor, component by component: the analytic gradient of a sample of elements (the
  // three largest and three at random) against a central finite difference of the loss. A
  // gradient wrong by a constant factor or missing a term fails on its largest components.
  int checked = 0;
  for (Param& p : m.params()) {
    std::span<float> value = p.value.span();
    const std::vector<float> g(p.grad.span().begin(), p.grad.span().end());
    std::vector<size_t> order(g.size());
    for (size_t i = 0; i < order.size(); ++i) order[i] = i;
    std::partial_sort(order.begin(), order.begin() + std::min<size_t>(3, order.size()), order.end(),
                      [&](size_t x, size_t y) { return std::abs(g[x]) > std::abs(g[y]); });
    std::vector<size_t> sample(order.begin(), order.begin() + std::min<size_t>(3, order.size()));
    for (int k = 0; k < 3; ++k) sample.push_back(rng.below(g.size()));
    for (size_t i : sample) {
      const float orig = value[i];
      const double eps = 1e-2;
      value[i] = orig + static_cast<float>(eps);
      const double up = m.loss(tokens, targets, b, t).value();
      value[i] = orig - static_cast<float>(eps);
      const double down = m.loss(tokens, targets, b, t).value();
      value[i] = orig;
      const double fd = (up - down) / (2 * eps);
      // float32 forward passes: the difference quotient carries ~1e-4 of rounding noise.
      EXPECT_NEAR(g[i], fd, 0.02 * std::abs(fd) + 2e-4)
          << p.name << "[" << i << "] analytic " << g[i] << " vs finite difference " << fd;
      ++checked;
    }
  }
  EXPECT_GE(checked, 6 * 10) << "too few tensors checked";

  // And every component at once: the derivative along a tensor's own normalized gradient must
  // equal the gradient's norm (a gradient g' != g gives g.g'/|g'| instead).
  for (Param& p : m.params()) {
    std::vector<float> g(p.grad.span().begin(), p.grad.span().end());
    double norm = 0.0;
    for (float v : g) norm += static_cast<double>(v) * v;
    norm = std::sqrt(norm);
    if (norm < 1e-6) continue;  // e.g. unused wpe rows only
    const std::vector<float> orig(p.value.span().begin(), p.value.span().end());
    const double eps = 1e-2;
    auto loss_at = [&](double s) {
      for (size_t i = 0; i < orig.size(); ++i) {
        p.value.span()[i] = orig[i] + static_cast<float>(s * g[i] / norm);
      }
      return m.loss(tokens, targets, b, t).value();
    };
    const double fd = (loss_at(eps) - loss_at(-eps)) / (2 * eps);
    loss_at(0.0);
    EXPECT_NEAR(fd / norm, 1.0, 2e-2) << p.name << " |g| = " << norm;
  }
}

}  // namespace
}  // namespace ntp::model
