// MoeBlock against the independent float64 reference (moe_reference.h): the output, the aux loss
// and the routing (top-k sets, counts, ties); config and holding validation.
//
// Weights are redrawn larger than the N(0, 0.02) init (router N(0, 0.5), experts N(0, 0.3)) on
// inputs h ~ N(0, 1), so the router is far from uniform and SwiGLU is away from its linear
// regime. u = 2^-24 is float32's unit roundoff.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
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
// (hidden + ffn + E + k + 11) u + 3e-7 ~ 6e-6 at E = 8, k = 8. aux = E sum_e f_e P_e with P_e a
// double sum of float probs each (E + 6) u off: relative (E + 6) u ~ 1e-6.
TEST(MoeBlockTest, ForwardMatchesFloat64Reference) {
  for (const Case& k : kCases) {
    SCOPED_TRACE(case_name(k));
    const MoeConfig c = test_config(k.e, k.k, k.shared, k.normalize);
    MoeBlock b = make_block(c, MoeHolding::all(c));
    const std::vector<float> h = normal_vector(kTokens * kHidden, 17);
    std::vector<float> y(h.size());
    auto aux = b.forward(h, kTokens, y);
    ASSERT_TRUE(aux.ok());
    const moe_reference::Output ref =
        moe_reference::moe_forward(c, logical_weights(b), to_double(h), kTokens);
    // fp32 logits are within ~hidden * u * sum|terms| ~ 1e-5 of the float64 ones: a larger gap
    // means both pick the same top-k sets.
    ASSERT_GT(ref.min_gap, 1e-4);
    double ymax = 0.0, err = 0.0;
    for (size_t i = 0; i < y.size(); ++i) {
      ymax = std::max(ymax, std::abs(ref.y[i]));
      err = std::max(err, std::abs(y[i] - ref.y[i]));
    }
    err /= ymax;
    const double aux_err = std::abs(*aux - ref.aux) / ref.aux;
    const double bound = static_cast<double>(kHidden + kFfn + k.e + k.k + 11) * kU + kFastExp;
    std::printf("%s: max|y| %.3f, y rel. error %.2e (bound %.2e), aux %.6f rel. error %.2e\n",
                case_name(k).c_str(), ymax, err, bound, ref.aux, aux_err);
    EXPECT_LT(err, bound);
    EXPECT_LT(aux_err, static_cast<double>(k.e + 6) * kU);
    EXPECT_GT(ymax, 0.5);  // not a degenerate output
  }
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
  const std::vector<float> h = normal_vector(kTokens * kHidden, 31);
  std::vector<float> y(h.size());
  auto aux = b.forward(h, kTokens, y);
  ASSERT_TRUE(aux.ok());
  const moe_reference::Output ref =
      moe_reference::moe_forward(c, logical_weights(b), to_double(h), kTokens);
  EXPECT_EQ(b.expert_counts(), (std::vector<int64_t>{kTokens, kTokens, 0, 0, 0, 0}));
  EXPECT_EQ(b.expert_counts(), ref.counts);
  EXPECT_EQ(b.selected(), ref.selected);
  for (float w : b.combine_weights()) EXPECT_EQ(w, 0.5f);
  // aux = E * (2 experts * (n / n) * 1/E) = 2 (each prob 1/6 rounds once; the sum is in double).
  EXPECT_NEAR(*aux, 2.0, 8 * kU);
}

}  // namespace
}  // namespace ntp::model
