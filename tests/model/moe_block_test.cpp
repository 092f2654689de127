// MoeBlock against the independent float64 reference (moe_reference.h): the output, the aux loss
// and the routing (top-k sets, counts, ties); every gradient against central finite differences
// of the reference; an uneven two-rank expert split against the one-rank block; config and
// holding validation.
//
// Weights are redrawn larger than the N(0, 0.02) init (router N(0, 0.5), experts N(0, 0.3)) on
// inputs h ~ N(0, 1), so the router is far from uniform and SwiGLU is away from its linear
// regime. u = 2^-24 is float32's unit roundoff.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "core/rng.h"
#include "model/moe_block.h"
#include "moe_reference.h"

namespace ntp::model {
namespace {

constexpr int64_t kHidden = 16, kFfn = 12, kTokens = 24;
constexpr double kU = 1.0 / (1 << 24);
// fast_exp's relative error (kernels/cpu/fast_exp.h), inside the SwiGLU kernel's silu.
constexpr double kFastExp = 3e-7;

MoeConfig test_config(int64_t e, int64_t k, int64_t shared, bool normalize = true) {
  MoeConfig c;
  c.hidden = kHidden;
  c.ffn = kFfn;
  c.n_experts = e;
  c.top_k = k;
  c.n_shared = shared;
  c.normalize_top_k = normalize;
  return c;
}

uint64_t name_key(const std::string& name) {
  uint64_t x = 1469598103934665603ULL;  // FNV-1a
  for (char ch : name) x = (x ^ static_cast<uint8_t>(ch)) * 1099511628211ULL;
  return x;
}

// A function of (seed, name, element) only, so blocks of any holding get the same weights.
void redraw_weights(MoeBlock& b, uint64_t seed) {
  for (Param& p : b.params()) {
    Rng rng = Rng(seed).fork(name_key(p.name));
    const double sd = p.name.find("gate.weight") != std::string::npos &&
                              p.name.find("shared") == std::string::npos
                          ? 0.5
                          : 0.3;
    for (int64_t i = 0; i < p.value.numel(); ++i)
      p.value[i] = static_cast<float>(sd * rng.normal());
  }
}

moe_reference::Weights logical_weights(const MoeBlock& b) {
  moe_reference::Weights w;
  for (const Param& p : b.params())
    w[p.name] = std::vector<double>(p.value.span().begin(), p.value.span().end());
  return w;
}

std::vector<float> normal_vector(int64_t size, uint64_t seed) {
  Rng rng(seed);
  std::vector<float> v(static_cast<size_t>(size));
  for (float& x : v) x = static_cast<float>(rng.normal());
  return v;
}

std::vector<double> to_double(const std::vector<float>& v) {
  return std::vector<double>(v.begin(), v.end());
}

MoeBlock make_block(const MoeConfig& c, MoeHolding holding, uint64_t seed = 5) {
  auto b = MoeBlock::create(c, std::move(holding), 1);
  NTP_CHECK(b.ok());
  redraw_weights(*b, seed);
  return std::move(*b);
}

// One forward of `b` on kTokens normal draws of `seed`, and the float64 reference's on the same
// input and weights. A failed forward leaves aux NaN, which fails every comparison.
struct ForwardAndReference {
  std::vector<float> y;
  double aux = std::nan("");
  moe_reference::Output ref = {};
};
ForwardAndReference forward_and_reference(const MoeConfig& c, MoeBlock& b, uint64_t seed) {
  const std::vector<float> h = normal_vector(kTokens * kHidden, seed);
  ForwardAndReference run{.y = std::vector<float>(h.size())};
  const Result<double> aux = b.forward(h, kTokens, run.y);
  EXPECT_TRUE(aux.ok()) << aux.status().to_string();
  if (aux.ok()) run.aux = *aux;
  run.ref = moe_reference::moe_forward(c, logical_weights(b), to_double(h), kTokens);
  return run;
}

struct Case {
  int64_t e, k, shared;
  bool normalize;
};
const std::vector<Case> kCases = {{4, 1, 0, true},  {4, 2, 0, true}, {8, 2, 0, true},
                                  {8, 2, 1, true},  {8, 1, 2, true}, {8, 3, 1, false},
                                  {6, 2, 0, false}, {8, 8, 0, true}};

std::string case_name(const Case& k) {
  return "E " + std::to_string(k.e) + " k " + std::to_string(k.k) + " shared " +
         std::to_string(k.shared) + (k.normalize ? " normalized" : " unnormalized");
}

TEST(MoeConfigTest, ValidationNamesTheBadField) {
  MoeConfig c = test_config(8, 2, 1);
  EXPECT_TRUE(c.validate().ok());
  c.top_k = 9;
  EXPECT_NE(c.validate().to_string().find("top_k"), std::string::npos);
  c = test_config(8, 2, 1);
  c.ffn = 0;
  EXPECT_NE(c.validate().to_string().find("ffn"), std::string::npos);
  c = test_config(8, 2, -1);
  EXPECT_NE(c.validate().to_string().find("n_shared"), std::string::npos);

  c = test_config(8, 2, 1);
  EXPECT_FALSE(validate_holding(c, MoeHolding{{0, 8}, true}).ok());
  EXPECT_FALSE(validate_holding(c, MoeHolding{{3, 3}, true}).ok());
  EXPECT_TRUE(validate_holdings(c, {MoeHolding{{0, 2, 5}, true}, {{1, 3, 4, 6, 7}, false}}).ok());
  EXPECT_NE(validate_holdings(c, {MoeHolding{{0, 2, 5}, true}, {{1, 3, 4, 6}, false}})
                .to_string()
                .find("expert 7"),
            std::string::npos);
  EXPECT_NE(validate_holdings(c, {MoeHolding{{0, 2, 5}, true}, {{1, 3, 4, 6, 7}, true}})
                .to_string()
                .find("lead"),
            std::string::npos);
}

TEST(MoeBlockTest, ParametersHaveMixtralNamesAndShapes) {
  const MoeConfig c = test_config(8, 2, 2);
  auto b = MoeBlock::create(c, MoeHolding{{5, 1}, true}, 3, "model.layers.0.");
  ASSERT_TRUE(b.ok());
  std::vector<std::string> names;
  for (const Param& p : b->params()) names.push_back(p.name);
  const std::string m = "model.layers.0.block_sparse_moe.";
  EXPECT_EQ(names,
            (std::vector<std::string>{
                m + "gate.weight", m + "experts.5.w1.weight", m + "experts.5.w2.weight",
                m + "experts.5.w3.weight", m + "experts.1.w1.weight", m + "experts.1.w2.weight",
                m + "experts.1.w3.weight", m + "shared_experts.gate_proj.weight",
                m + "shared_experts.up_proj.weight", m + "shared_experts.down_proj.weight"}));
  EXPECT_EQ(b->params()[0].logical_shape, (std::vector<int64_t>{8, kHidden}));
  EXPECT_EQ(b->params()[2].logical_shape, (std::vector<int64_t>{kHidden, kFfn}));
  EXPECT_EQ(b->params()[9].logical_shape, (std::vector<int64_t>{kHidden, 2 * kFfn}));
  // A non-lead holds no shared experts; init is a function of the name, not of the holding.
  auto other = MoeBlock::create(c, MoeHolding{{1}, false}, 3, "model.layers.0.");
  ASSERT_TRUE(other.ok());
  ASSERT_EQ(other->params().size(), 4u);
  EXPECT_EQ(other->params()[1].name, m + "experts.1.w1.weight");
  for (int64_t i = 0; i < kFfn * kHidden; ++i) {
    ASSERT_EQ(other->params()[1].value[i], b->params()[4].value[i]);
  }
  EXPECT_FALSE(MoeBlock::create(c, MoeHolding{{8}, true}, 3).ok());
}

// Output and aux against the float64 reference. Error bound of one output element, relative to
// the largest |y| (the draws keep max|y| within a few times each element's sum of |terms|):
// the gate/up dot products round with up to hidden * u, silu adds fast_exp's 3e-7 and ~4 u,
// the down product ffn * u, softmax and renormalization ~(E + 6) u (sums in double, a few float
// roundings), the combine multiply-add of k + 1 terms (k + 1) u: about
// (hidden + ffn + E + k + 11) u + 3e-7 ~ 3.6e-6 at E = 8, k = 8 (measured 0.9e-7 to 2.6e-7).
// aux = E sum_e f_e P_e with P_e a double sum of float probs each (E + 6) u off: relative
// (E + 6) u ~ 8e-7 (measured <= 1.7e-8).
TEST(MoeBlockTest, ForwardMatchesFloat64Reference) {
  for (const Case& k : kCases) {
    SCOPED_TRACE(case_name(k));
    const MoeConfig c = test_config(k.e, k.k, k.shared, k.normalize);
    MoeBlock b = make_block(c, MoeHolding::all(c));
    const auto [y, aux, ref] = forward_and_reference(c, b, 17);
    // fp32 logits are within ~hidden * u * sum|terms| ~ 1e-5 of the float64 ones: a larger gap
    // means both pick the same top-k sets.
    ASSERT_GT(ref.min_gap, 1e-4);
    double ymax = 0.0, err = 0.0;
    for (size_t i = 0; i < y.size(); ++i) {
      ymax = std::max(ymax, std::abs(ref.y[i]));
      err = std::max(err, std::abs(y[i] - ref.y[i]));
    }
    err /= ymax;
    const double aux_err = std::abs(aux - ref.aux) / ref.aux;
    const double bound = static_cast<double>(kHidden + kFfn + k.e + k.k + 11) * kU + kFastExp;
    std::printf("%s: max|y| %.3f, y rel. error %.2e (bound %.2e), aux %.6f rel. error %.2e\n",
                case_name(k).c_str(), ymax, err, bound, ref.aux, aux_err);
    EXPECT_LT(err, bound);
    EXPECT_LT(aux_err, static_cast<double>(k.e + 6) * kU);
    EXPECT_GT(ymax, 0.5);  // not a degenerate output
  }
}

// --dtype bf16 reaches the experts: their products read bf16-rounded inputs (kernels/cpu/matmul.h)
// while the router stays float32, so the routing is the float32 block's exactly. The output moves
// by what rounding the inputs of two products in a row gives: one product's relative error has
// RMS ~ sqrt(2/3) u_b = 3.2e-3 (u_b = 2^-8; two independent input roundings, each uniform within
// +-u_b), the gate's and the up projection's pass through SwiGLU into the down projection's
// input (sqrt(2) x 3.2e-3), which adds its own: sqrt(3) x 3.2e-3 = 5.5e-3 of the output's RMS.
// The expert weights' gradients come from the same roundings, through the backward's products,
// which this estimate does not follow term by term. Measured: output 5.6e-3 (1.02 of the
// estimate), gradient 4.0e-3 (0.73). Bands, set by the derivations rather than by sampling (an
// RMS over 24 tokens x 16 outputs spreads by a few %): the output's, derived term by term, a
// factor 1.5 either way (room for the rounding model's assumptions: independent, uniform); the
// gradient's, not derived term by term, a factor 3. Experts left in float32 would read ~1e-7,
// 10^4 below either.
TEST(MoeBlockTest, TheExpertsRunAtTheModelsDtypeAndTheRouterStaysFloat32) {
  const MoeConfig c = test_config(8, 2, 0);
  MoeBlock fp32 = make_block(c, MoeHolding::all(c));
  MoeBlock bf16 = make_block(c, MoeHolding::all(c));
  bf16.set_matmul_dtype(kernels::cpu::MatmulDtype::kBf16);
  const std::vector<float> h = normal_vector(kTokens * kHidden, 17);
  const std::vector<float> dy = normal_vector(kTokens * kHidden, 23);
  std::vector<float> y32(h.size()), y16(h.size()), dh(h.size());
  ASSERT_TRUE(fp32.forward(h, kTokens, y32).ok());
  ASSERT_TRUE(bf16.forward(h, kTokens, y16).ok());
  EXPECT_EQ(bf16.probs(), fp32.probs());  // bit for bit: the router's product is float32
  EXPECT_EQ(bf16.selected(), fp32.selected());
  auto relative_rms = [](std::span<const float> got, std::span<const float> want) {
    double diff = 0.0, norm = 0.0;
    for (size_t i = 0; i < want.size(); ++i) {
      diff += (static_cast<double>(got[i]) - want[i]) * (static_cast<double>(got[i]) - want[i]);
      norm += static_cast<double>(want[i]) * want[i];
    }
    return std::sqrt(diff / norm);
  };
  const double expected = std::sqrt(3.0) * std::sqrt(2.0 / 3.0) / 256.0;
  const double output = relative_rms(y16, y32);
  ASSERT_TRUE(fp32.backward(dy, 0.0, dh).ok());
  ASSERT_TRUE(bf16.backward(dy, 0.0, dh).ok());
  const Param* w1_32 = nullptr;
  const Param* w1_16 = nullptr;
  for (size_t i = 0; i < fp32.params().size(); ++i) {
    if (fp32.params()[i].name.find("experts.0.w1") != std::string::npos) {
      w1_32 = &fp32.params()[i];
      w1_16 = &bf16.params()[i];
    }
  }
  ASSERT_NE(w1_32, nullptr);
  const double grad = relative_rms(w1_16->grad.span(), w1_32->grad.span());
  std::printf(
      "bf16 experts: output %.2e, expert 0's w1 gradient %.2e relative RMS from float32 "
      "(arithmetic: ~%.1e)\n",
      output, grad, expected);
  EXPECT_GT(output, expected / 1.5);
  EXPECT_LT(output, expected * 1.5);
  EXPECT_GT(grad, expected / 3);
  EXPECT_LT(grad, expected * 3);
}

// Routing is discrete: the top-k ids (in descending order) and the per-expert counts equal the
// reference's exactly, whenever no top-k boundary is within float32 reach of a tie.
TEST(MoeBlockTest, RouterCountsMatchTheReferenceExactly) {
  for (const Case& k : kCases) {
    SCOPED_TRACE(case_name(k));
    const MoeConfig c = test_config(k.e, k.k, k.shared, k.normalize);
    MoeBlock b = make_block(c, MoeHolding::all(c), 23);
    const std::vector<float> h = normal_vector(kTokens * kHidden, 29);
    std::vector<float> y(h.size());
    ASSERT_TRUE(b.forward(h, kTokens, y).ok());
    const moe_reference::Output ref =
        moe_reference::moe_forward(c, logical_weights(b), to_double(h), kTokens);
    ASSERT_GT(ref.min_gap, 1e-4);  // see ForwardMatchesFloat64Reference
    EXPECT_EQ(b.expert_counts(), ref.counts);
    int64_t total = 0;
    for (int64_t n : b.expert_counts()) total += n;
    EXPECT_EQ(total, kTokens * k.k);
    // The ids in descending probability too (no two probs of a token are near a tie on these
    // draws: the order within a top-k set is not protected by min_gap, but is by the seed).
    EXPECT_EQ(b.selected(), ref.selected);
  }
}

// All logits equal (zero router): every prob is 1/E and ties go to the lower ids, as in the
// reference; the combine weights are then 1/k exactly (normalized).
TEST(MoeBlockTest, TiesGoToTheLowerExpertId) {
  const MoeConfig c = test_config(6, 2, 0);
  MoeBlock b = make_block(c, MoeHolding::all(c));
  std::fill(b.params()[0].value.span().begin(), b.params()[0].value.span().end(), 0.0f);
  const auto [y, aux, ref] = forward_and_reference(c, b, 31);
  EXPECT_EQ(b.expert_counts(), (std::vector<int64_t>{kTokens, kTokens, 0, 0, 0, 0}));
  EXPECT_EQ(b.expert_counts(), ref.counts);
  EXPECT_EQ(b.selected(), ref.selected);
  for (float w : b.combine_weights()) EXPECT_EQ(w, 0.5f);
  // aux = E * (2 experts * (n / n) * 1/E) = 2 (each prob 1/6 rounds once; the sum is in double).
  EXPECT_NEAR(aux, 2.0, 8 * kU);
}

TEST(MoeBlockTest, BackwardNeedsAForwardAndMatchingSizes) {
  const MoeConfig c = test_config(4, 2, 0);
  MoeBlock b = make_block(c, MoeHolding::all(c));
  std::vector<float> h = normal_vector(kTokens * kHidden, 3), y(h.size()), dh(h.size());
  EXPECT_EQ(b.backward(h, 0.02, dh).code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(b.forward(h, kTokens + 1, y).status().code(), StatusCode::kInvalidArgument);
  ASSERT_TRUE(b.forward(h, kTokens, y).ok());
  std::vector<float> short_dy(h.size() - 1);
  EXPECT_EQ(b.backward(short_dy, 0.02, dh).code(), StatusCode::kInvalidArgument);
  // Gradients accumulate over calls: a second backward doubles them.
  ASSERT_TRUE(b.backward(h, 0.02, dh).ok());
  const std::vector<float> once(b.params()[1].grad.span().begin(), b.params()[1].grad.span().end());
  ASSERT_TRUE(b.backward(h, 0.02, dh).ok());
  for (size_t i = 0; i < once.size(); ++i) {
    ASSERT_EQ(b.params()[1].grad[static_cast<int64_t>(i)], 2 * once[i]);
  }
}

// The largest |gradient - finite difference| of one tensor, relative to its largest |finite
// difference|, and that largest value.
struct GradError {
  double rel = 0.0, scale = 0.0, max_grad = 0.0;
};

// Every element of every parameter and of h, against central differences of the reference's
// L = sum(y * r) + coef * aux. Step 1e-5 on values of size ~1: truncation (step^2 f''' / 6) and
// cancellation (1e-16 |L| / step, |L| < 100) are both below 1e-9 of the gradients' scale, so the
// error measured is the float32 backward's. Its bound, relative to the tensor's largest gradient:
// a weight gradient sums up to n tokens (n u) of products whose factors come from chains of dot
// products over hidden, ffn and E terms (each ~K u), the silu derivative recomputes fast_exp
// (3e-7) and the router adds the renormalization and softmax backward (~(E + k + 10) u):
// (n + 2 hidden + 2 ffn + 2 E + k + 20) u + 2 * 3e-7 ~ 1.3e-6 at E = 8 (measured <= 4.2e-7).
TEST(MoeBlockTest, GradientsMatchFiniteDifferencesOfTheReference) {
  const std::vector<Case> cases = {
      {8, 2, 1, true}, {4, 1, 0, true}, {8, 3, 1, false}, {6, 2, 0, false}};
  // (r random, Mixtral's coefficient 0.02) and (r = 0, coefficient 1): the second isolates the
  // aux loss's gradient (router and input only; the experts' gradients are exactly zero).
  const std::vector<std::pair<bool, double>> losses = {{true, 0.02}, {false, 1.0}};
  const double step = 1e-5;
  double worst = 0.0;
  for (const Case& k : cases) {
    for (const auto& [with_r, coef] : losses) {
      const std::string name = case_name(k) + (with_r ? ", sum(y r) + 0.02 aux" : ", aux only");
      SCOPED_TRACE(name);
      const MoeConfig c = test_config(k.e, k.k, k.shared, k.normalize);
      MoeBlock b = make_block(c, MoeHolding::all(c), 41);
      const std::vector<float> h = normal_vector(kTokens * kHidden, 43);
      std::vector<float> r = normal_vector(kTokens * kHidden, 47);
      if (!with_r) std::fill(r.begin(), r.end(), 0.0f);
      std::vector<float> y(h.size()), dh(h.size());
      ASSERT_TRUE(b.forward(h, kTokens, y).ok());
      ASSERT_TRUE(b.backward(r, coef, dh).ok());

      moe_reference::Weights wts = logical_weights(b);
      std::vector<double> hd = to_double(h);
      const std::vector<double> rd = to_double(r);
      // No top-k set may change under a step: a router weight step moves a logit by at most
      // step * max|h|, an input step by step * max|router weight|; experts do not route.
      const moe_reference::Output ref = moe_reference::moe_forward(c, wts, hd, kTokens);
      double reach = 0.0;
      for (double v : hd) reach = std::max(reach, step * std::abs(v));
      for (double v : wts.at("block_sparse_moe.gate.weight")) {
        reach = std::max(reach, step * std::abs(v));
      }
      ASSERT_GT(ref.min_gap, 100 * reach);

      auto check = [&](const std::string& tensor, std::vector<double>& x,
                       std::span<const float> grad) {
        GradError e;
        std::vector<double> fd(x.size());
        for (size_t i = 0; i < x.size(); ++i) {
          const double x0 = x[i];
          x[i] = x0 + step;
          const double fp = moe_reference::moe_loss(c, wts, hd, kTokens, rd, coef);
          x[i] = x0 - step;
          const double fm = moe_reference::moe_loss(c, wts, hd, kTokens, rd, coef);
          x[i] = x0;
          fd[i] = (fp - fm) / (2 * step);
          e.scale = std::max(e.scale, std::abs(fd[i]));
          e.max_grad = std::max(e.max_grad, std::abs(static_cast<double>(grad[i])));
        }
        for (size_t i = 0; i < x.size(); ++i) e.rel = std::max(e.rel, std::abs(grad[i] - fd[i]));
        if (e.scale < 1e-8) {
          // No dependence (an expert under the aux-only loss): the gradient is exactly zero and
          // the differences are rounding noise (< 1e-16 |L| / step).
          EXPECT_EQ(e.max_grad, 0.0) << tensor;
          return;
        }
        e.rel /= e.scale;
        const double bound =
            static_cast<double>(kTokens + 2 * kHidden + 2 * kFfn + 2 * k.e + k.k + 20) * kU +
            2 * kFastExp;
        EXPECT_LT(e.rel, bound) << tensor << " (largest gradient " << e.scale << ")";
        worst = std::max(worst, e.rel);
        std::printf("  %-48s max |grad| %.3e  rel. error %.2e\n", tensor.c_str(), e.scale, e.rel);
      };
      std::printf("%s\n", name.c_str());
      for (const Param& p : b.params()) check(p.name, wts.at(p.name), p.grad.span());
      check("input h", hd, dh);
    }
  }
  std::printf("worst relative gradient error %.2e\n", worst);
}

// Two ranks holding experts {0, 2, 5} (the lead, with the shared expert) and {1, 3, 4, 6, 7}:
// their partial outputs sum to the one-rank output; their expert and shared-expert gradients
// equal the one-rank ones bit for bit (the same tokens, gathered in the same order, through the
// same products); their partial router gradients and input gradients sum to the one-rank ones.
TEST(MoeBlockTest, ExpertParallelPartialsSumToTheOneRankBlock) {
  const MoeConfig c = test_config(8, 2, 1);
  const std::vector<MoeHolding> ranks = {{{0, 2, 5}, true}, {{1, 3, 4, 6, 7}, false}};
  ASSERT_TRUE(validate_holdings(c, ranks).ok());
  MoeBlock full = make_block(c, MoeHolding::all(c), 53);
  std::vector<MoeBlock> parts;
  for (const MoeHolding& hold : ranks) parts.push_back(make_block(c, hold, 53));
  const std::vector<float> h = normal_vector(kTokens * kHidden, 59);
  const std::vector<float> dy = normal_vector(kTokens * kHidden, 61);
  const double coef = 0.02;
  std::vector<float> y(h.size()), dh(h.size());
  auto aux = full.forward(h, kTokens, y);
  ASSERT_TRUE(aux.ok());
  ASSERT_TRUE(full.backward(dy, coef, dh).ok());
  std::vector<float> y_sum(h.size(), 0.0f), dh_sum(h.size(), 0.0f);
  std::vector<float> router_sum(static_cast<size_t>(8 * kHidden), 0.0f);
  for (MoeBlock& part : parts) {
    std::vector<float> yp(h.size()), dhp(h.size());
    auto aux_p = part.forward(h, kTokens, yp);
    ASSERT_TRUE(aux_p.ok());
    EXPECT_EQ(*aux_p, *aux);  // the same routing on every rank
    EXPECT_EQ(part.expert_counts(), full.expert_counts());
    ASSERT_TRUE(part.backward(dy, coef, dhp).ok());
    for (size_t i = 0; i < h.size(); ++i) y_sum[i] += yp[i], dh_sum[i] += dhp[i];
    const Param& router = part.params()[0];
    for (size_t i = 0; i < router_sum.size(); ++i) {
      router_sum[i] += router.grad[static_cast<int64_t>(i)];
    }
    // Every tensor a part holds besides the router: bit-identical gradient.
    for (size_t q = 1; q < part.params().size(); ++q) {
      const Param& pp = part.params()[q];
      const auto it = std::find_if(full.params().begin(), full.params().end(),
                                   [&](const Param& f) { return f.name == pp.name; });
      ASSERT_NE(it, full.params().end()) << pp.name;
      for (int64_t i = 0; i < pp.grad.numel(); ++i) {
        ASSERT_EQ(pp.grad[i], it->grad[i]) << pp.name << " element " << i;
      }
    }
  }
  auto rel_diff = [](std::span<const float> a, std::span<const float> b) {
    double diff = 0.0, scale = 0.0;
    for (size_t i = 0; i < a.size(); ++i) {
      diff = std::max(diff, std::abs(static_cast<double>(a[i]) - b[i]));
      scale = std::max(scale, std::abs(static_cast<double>(b[i])));
    }
    return diff / scale;
  };
  const double y_err = rel_diff(y_sum, y), dh_err = rel_diff(dh_sum, dh);
  const double router_err = rel_diff(router_sum, full.params()[0].grad.span());
  std::printf("two ranks vs one: y %.2e, dh %.2e, router gradient %.2e (relative)\n", y_err, dh_err,
              router_err);
  // y: each element's k + 1 terms (2 experts, the shared one) regrouped into 2 partial sums:
  // (k + 2) u of the sum of |terms|. dh adds per rank the router's E-term product: (k + E + 4) u.
  // The router gradient: each rank's dlogits go through the n-token product dlogits^T h
  // separately, then the 2 partials are added: (n + E + k + 4) u of the sum of |terms|.
  // Measured: y 4.5e-8, dh 4.6e-8, router 9.7e-8.
  EXPECT_LT(y_err, static_cast<double>(2 + 2) * kU);
  EXPECT_LT(dh_err, static_cast<double>(2 + 8 + 4) * kU);
  EXPECT_LT(router_err, static_cast<double>(kTokens + 8 + 2 + 4) * kU);
}

}  // namespace
}  // namespace ntp::model
