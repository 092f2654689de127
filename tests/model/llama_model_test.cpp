// LlamaModel at degree 1 against the independent float64 reference (llama_reference.h): the loss,
// and every kind of parameter's gradient against central finite differences of the reference.
// Also: config and layout validation, layout-independent init, the [outer, units, inner] unit
// views and KV-copy marks of a partial shard, the grads-ready order, loss_scale.
//
// Weights are redrawn larger than the N(0, 0.02) init (matrices N(0, 0.4), norm weights
// 1 + N(0, 0.3)) so that attention is far from uniform, RoPE and the causal mask change the
// result, and SwiGLU is away from its linear regime: small-init gradients would hide mistakes.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <set>
#include <string>

#include "core/rng.h"
#include "gradient_check.h"
#include "llama_reference.h"
#include "model/llama_model.h"
#include "model_shapes.h"
#include "random_inputs.h"

namespace ntp::model {
namespace {

constexpr int64_t kB = 2, kT = 7;

LlamaConfig test_config() { return testing::tiny_llama(); }

void make_batch(const LlamaConfig& c, std::vector<int32_t>& tokens, std::vector<int32_t>& targets) {
  Rng rng(11);
  testdata::random_batch(rng, kB * kT, c.vocab_size, tokens, targets);
}

void redraw_weights(LlamaModel& m) {
  Rng rng(5);
  for (Param& p : m.params()) {
    const bool norm = p.name.find("norm") != std::string::npos;
    for (int64_t i = 0; i < p.value.numel(); ++i) {
      p.value[i] = static_cast<float>(norm ? 1.0 + 0.3 * rng.normal() : 0.4 * rng.normal());
    }
  }
}

reference::Weights logical_weights(const LlamaModel& m) {
  return gradcheck::logical_weights(m.params());
}

TEST(LlamaConfigTest, ValidationNamesTheBadField) {
  LlamaConfig c = test_config();
  EXPECT_TRUE(c.validate().ok());
  c.n_kv_head = 3;
  EXPECT_NE(c.validate().to_string().find("n_kv_head"), std::string::npos);
  c = test_config();
  c.head_dim = 5;
  EXPECT_NE(c.validate().to_string().find("odd"), std::string::npos);
  c = test_config();
  c.n_ffn = 27;
  EXPECT_NE(c.validate().to_string().find("ffn_unit"), std::string::npos);
  c = test_config();
  c.rope_theta = 0.0;
  EXPECT_FALSE(c.validate().ok());
  // num_params counts the logical tensors create() makes.
  c = test_config();
  auto m = LlamaModel::create(c, full_shard(c), 1);
  ASSERT_TRUE(m.ok());
  int64_t total = 0;
  for (const Param& p : m->params()) total += shape_numel(p.logical_shape);
  EXPECT_EQ(total, c.num_params());
}

TEST(LlamaShardTest, LayoutsAreValidAndValidationCatchesMistakes) {
  const LlamaConfig c = test_config();
  for (int degree : {1, 2, 3, 5}) {
    EXPECT_TRUE(validate_layout(c, contiguous_layout(c, degree)).ok()) << degree;
    EXPECT_TRUE(validate_layout(c, shuffled_layout(c, degree, 3)).ok()) << degree;
  }
  std::vector<LlamaShard> layout = contiguous_layout(c, 2);
  layout[1].head_rows.push_back(layout[0].head_rows[0]);
  EXPECT_NE(validate_layout(c, layout).to_string().find("lm_head row"), std::string::npos);
  layout = contiguous_layout(c, 2);
  layout[0].heads.pop_back();
  EXPECT_NE(validate_layout(c, layout).to_string().find("assigned to no rank"), std::string::npos);
  LlamaShard bad;
  bad.heads = {4};
  EXPECT_FALSE(validate_shard(c, bad).ok());
}

TEST(LlamaShardTest, KvGroupsAndTheirOwners) {
  const LlamaConfig c = test_config();  // 4 query heads, 2 per KV group
  LlamaShard s;
  s.heads = {3, 1};  // reads groups 1 and 0; first heads of groups are 0 and 2
  EXPECT_EQ(kv_groups(c, s), (std::vector<int64_t>{0, 1}));
  EXPECT_FALSE(owns_kv_group(c, s, 0));
  EXPECT_FALSE(owns_kv_group(c, s, 1));
  s.heads = {2, 0};
  EXPECT_TRUE(owns_kv_group(c, s, 0));
  EXPECT_TRUE(owns_kv_group(c, s, 1));
}

TEST(LlamaModelTest, LossMatchesFloat64Reference) {
  // GQA (2 KV heads for 4 query heads), MQA (1) and plain multi-head attention (4).
  for (int64_t kv : {2, 1, 4}) {
    SCOPED_TRACE("n_kv_head " + std::to_string(kv));
    LlamaConfig c = test_config();
    c.n_kv_head = kv;
    auto m = LlamaModel::create(c, full_shard(c), 7);
    ASSERT_TRUE(m.ok());
    redraw_weights(*m);
    std::vector<int32_t> tokens, targets;
    make_batch(c, tokens, targets);
    const double want = reference::llama_loss(c, logical_weights(*m), tokens, targets, kB, kT);
    auto loss = m->loss(tokens, targets, kB, kT);
    ASSERT_TRUE(loss.ok());
    auto loss_fb = m->forward_backward(tokens, targets, kB, kT);
    ASSERT_TRUE(loss_fb.ok());
    const double err = std::abs(*loss - want) / want;
    std::printf("n_kv_head %lld: loss %.8f, float64 reference %.8f, rel. error %.2e\n",
                static_cast<long long>(kv), *loss, want, err);
    // Tens of float32 roundings (6e-8 each) in a chain per logit, partly cancelling in the mean:
    // measured 1e-9 to 6.5e-8; 1e-6 leaves room for another OpenBLAS core's summation order.
    EXPECT_LT(err, 1e-6);
    EXPECT_EQ(*loss, *loss_fb);
    EXPECT_GT(want, 1.0);  // not a degenerate (near-zero) loss
  }
}

// For every tensor: 6 elements and the derivative along the model's whole gradient, against
// central differences of the float64 reference. h = 1e-5 on weights of size ~0.4: truncation
// (h^2 f''') and cancellation (1e-16 / h) are both below 1e-9 relative, so the error measured is
// the float32 backward's: sums over 14 tokens of products over ~30 terms, 1.7e-6 of the tensor's
// largest gradient per element and 5e-7 along the gradient (measured); limits 1e-5 and 5e-6.
TEST(LlamaModelTest, GradientsMatchFiniteDifferencesOfTheReference) {
  const LlamaConfig c = test_config();
  auto m = LlamaModel::create(c, full_shard(c), 7);
  ASSERT_TRUE(m.ok());
  redraw_weights(*m);
  std::vector<int32_t> tokens, targets;
  make_batch(c, tokens, targets);
  ASSERT_TRUE(m->forward_backward(tokens, targets, kB, kT).ok());
  const gradcheck::GradientErrors worst = gradcheck::check_gradients(
      m->params(), logical_weights(*m),
      [&](const reference::Weights& w) {
        return reference::llama_loss(c, w, tokens, targets, kB, kT);
      },
      1e-5, 1e-5, 5e-6);
  std::printf(
      "worst element error (rel. to the tensor's largest gradient) %.2e, worst "
      "directional error %.2e\n",
      worst.element, worst.directional);
}

TEST(LlamaModelTest, InitDoesNotDependOnTheLayoutAndFollowsTheScheme) {
  const LlamaConfig c = test_config();
  auto full = LlamaModel::create(c, full_shard(c), 3);
  ASSERT_TRUE(full.ok());
  for (const LlamaShard& s : shuffled_layout(c, 3, 4)) {
    auto part = LlamaModel::create(c, s, 3);
    ASSERT_TRUE(part.ok());
    for (size_t k = 0; k < part->params().size(); ++k) {
      const Param& p = part->params()[k];
      std::vector<float> logical(static_cast<size_t>(shape_numel(p.logical_shape)), NAN);
      p.scatter_to_logical(p.value.span(), logical);
      for (size_t i = 0; i < logical.size(); ++i) {
        if (std::isnan(logical[i])) continue;
        ASSERT_EQ(logical[i], full->params()[k].value[static_cast<int64_t>(i)]) << p.name;
      }
    }
  }
  for (const Param& p : full->params()) {
    if (p.name.find("norm") != std::string::npos) {
      for (int64_t i = 0; i < p.value.numel(); ++i) ASSERT_EQ(p.value[i], 1.0f) << p.name;
      continue;
    }
    double sq = 0.0;
    for (int64_t i = 0; i < p.value.numel(); ++i) sq += p.value[i] * p.value[i];
    const double std = std::sqrt(sq / static_cast<double>(p.value.numel()));
    EXPECT_NEAR(std, 0.02, 0.004) << p.name;  // >= 240 draws: sampling error < 10%
  }
}

TEST(LlamaModelTest, UnitViewsAndKvCopyMarks) {
  const LlamaConfig c = test_config();
  LlamaShard s;
  s.heads = {3, 1};  // reads both KV groups, owns neither (heads 0 and 2 are elsewhere)
  s.ffn_units = {5, 0};
  s.vocab_rows = {7};
  s.head_rows = {};
  auto m = LlamaModel::create(c, s, 1);
  ASSERT_TRUE(m.ok());
  EXPECT_EQ(m->kv_groups(), (std::vector<int64_t>{0, 1}));
  for (const Param& p : m->params()) {
    if (p.replicated()) continue;
    const std::vector<int64_t> ids = p.space == UnitSpaceId::kHeads      ? s.heads
                                     : p.space == UnitSpaceId::kKvGroups ? m->kv_groups()
                                     : p.space == UnitSpaceId::kFfn      ? s.ffn_units
                                     : p.space == UnitSpaceId::kVocab    ? s.vocab_rows
                                                                         : s.head_rows;
    const int64_t units = p.space == UnitSpaceId::kHeads      ? c.n_head
                          : p.space == UnitSpaceId::kKvGroups ? c.n_kv_head
                          : p.space == UnitSpaceId::kFfn      ? c.ffn_units()
                                                              : c.vocab_size;
    ASSERT_EQ(p.unit_outer * units * p.unit_inner, shape_numel(p.logical_shape)) << p.name;
    ASSERT_EQ(p.local_units(), static_cast<int64_t>(ids.size())) << p.name;
    for (int64_t o = 0; o < p.unit_outer; ++o)
      for (int64_t u = 0; u < p.local_units(); ++u)
        for (int64_t i = 0; i < p.unit_inner; ++i) {
          const int64_t local = (o * p.local_units() + u) * p.unit_inner + i;
          const int64_t logical = (o * units + ids[static_cast<size_t>(u)]) * p.unit_inner + i;
          ASSERT_EQ(p.logical_offset(local), logical) << p.name;
        }
    if (p.space == UnitSpaceId::kKvGroups) {
      EXPECT_EQ(p.unit_copy, (std::vector<uint8_t>{1, 1})) << p.name;
      EXPECT_FALSE(p.counted(0));
    } else {
      EXPECT_TRUE(p.unit_copy.empty()) << p.name;
    }
  }
  EXPECT_EQ(m->find("lm_head.weight")->value.numel(), 0);
}

TEST(LlamaModelTest, GradsReadyReportsEveryParameterOnceAfterItsLastWrite) {
  const LlamaConfig c = test_config();
  auto m = LlamaModel::create(c, full_shard(c), 1);
  ASSERT_TRUE(m.ok());
  std::vector<int32_t> tokens, targets;
  make_batch(c, tokens, targets);
  std::vector<std::vector<int>> seen;
  std::vector<std::vector<float>> snapshot;
  BackwardOptions opt;
  opt.on_grads_ready = [&](std::span<const int> ids) {
    seen.emplace_back(ids.begin(), ids.end());
    for (int id : ids) {
      const Tensor& g = m->params()[static_cast<size_t>(id)].grad;
      snapshot.emplace_back(g.span().begin(), g.span().end());
    }
  };
  ASSERT_TRUE(m->forward_backward(tokens, targets, kB, kT, opt).ok());
  EXPECT_EQ(seen, m->grads_ready_order());
  std::set<int> all;
  size_t k = 0;
  for (const auto& group : seen) {
    for (int id : group) {
      EXPECT_TRUE(all.insert(id).second) << "parameter " << id << " reported twice";
      const Tensor& g = m->params()[static_cast<size_t>(id)].grad;
      EXPECT_TRUE(std::equal(snapshot[k].begin(), snapshot[k].end(), g.span().begin()))
          << m->params()[static_cast<size_t>(id)].name << " written after it was reported";
      ++k;
    }
  }
  EXPECT_EQ(all.size(), m->params().size());
  EXPECT_EQ(m->params()[static_cast<size_t>(seen.front()[0])].name, "lm_head.weight");
  EXPECT_EQ(m->params()[static_cast<size_t>(seen.back()[0])].name, "model.embed_tokens.weight");
}

TEST(LlamaModelTest, LossScaleScalesAndAccumulates) {
  const LlamaConfig c = test_config();
  auto a = LlamaModel::create(c, full_shard(c), 2);
  auto b = LlamaModel::create(c, full_shard(c), 2);
  ASSERT_TRUE(a.ok() && b.ok());
  std::vector<int32_t> tokens, targets;
  make_batch(c, tokens, targets);
  ASSERT_TRUE(a->forward_backward(tokens, targets, kB, kT).ok());
  BackwardOptions half;
  half.loss_scale = 0.5f;
  ASSERT_TRUE(b->forward_backward(tokens, targets, kB, kT, half).ok());
  ASSERT_TRUE(b->forward_backward(tokens, targets, kB, kT, half).ok());
  for (size_t k = 0; k < a->params().size(); ++k) {
    const Tensor& ga = a->params()[k].grad;
    const Tensor& gb = b->params()[k].grad;
    for (int64_t i = 0; i < ga.numel(); ++i) {
      ASSERT_NEAR(gb[i], ga[i], 1e-6f * (1.0f + std::abs(ga[i]))) << a->params()[k].name;
    }
  }
}

TEST(LlamaModelTest, RejectsBadBatches) {
  const LlamaConfig c = test_config();
  auto m = LlamaModel::create(c, full_shard(c), 1);
  ASSERT_TRUE(m.ok());
  std::vector<int32_t> tokens(9, 0), targets(9, 0);
  EXPECT_FALSE(m->loss(tokens, targets, 1, 9).ok());  // t > n_ctx
  tokens.resize(8), targets.resize(8);
  EXPECT_TRUE(m->loss(tokens, targets, 1, 8).ok());
  tokens[0] = 37;  // outside the vocabulary
  EXPECT_NE(m->loss(tokens, targets, 1, 8).status().to_string().find("37"), std::string::npos);
}

}  // namespace
}  // namespace ntp::model
