// Every CPU op against (1) the float64 reference forward in reference.h and (2) central finite
// differences of that float64 reference: for a random probe r, L(x) = sum(f(x) * r), and the
// kernel's float32 backward must match dL/dx. Sizes are small so the suite also runs under ASan.
#include <gtest/gtest.h>

#include <array>
#include <numeric>

#include "isa_variants.h"
#include "kernels/cpu/attention.h"
#include "kernels/cpu/cross_entropy.h"
#include "kernels/cpu/embedding.h"
#include "kernels/cpu/gelu.h"
#include "kernels/cpu/gemm.h"
#include "kernels/cpu/layernorm.h"
#include "kernels/cpu/linear.h"
#include "reference.h"

namespace ntp::kernels {
namespace {

using namespace reference;  // float64 references and finite differences (reference.h)

constexpr double kForwardTol = 2e-6;  // float32 forward vs float64 reference, relative to norm
constexpr double kGradTol = 1e-4;     // float32 backward vs float64 finite differences

TEST(GemmTest, AllTransposesAndStridesMatchNaiveProduct) {
  Rng rng(1);
  const int64_t m = 5, n = 7, k = 3, pad = 2;
  for (bool ta : {false, true}) {
    for (bool tb : {false, true}) {
      const int64_t lda = (ta ? m : k) + pad, ldb = (tb ? k : n) + pad, ldc = n + pad;
      Vec a = reference::random_vec(rng, (ta ? k : m) * lda);
      Vec b = reference::random_vec(rng, (tb ? n : k) * ldb);
      Vec c0 = reference::random_vec(rng, m * ldc);
      std::vector<float> c = to_float(c0);
      cpu::gemm(ta, tb, m, n, k, 0.5f, to_float(a).data(), lda, to_float(b).data(), ldb, 2.0f,
                c.data(), ldc);
      for (int64_t i = 0; i < m; ++i) {
        for (int64_t j = 0; j < n; ++j) {
          double s = 0.0;
          for (int64_t p = 0; p < k; ++p) {
            const double av = ta ? a[p * lda + i] : a[i * lda + p];
            const double bv = tb ? b[j * ldb + p] : b[p * ldb + j];
            s += static_cast<double>(static_cast<float>(av)) * static_cast<float>(bv);
          }
          const double want = 0.5 * s + 2.0 * static_cast<float>(c0[i * ldc + j]);
          EXPECT_NEAR(c[i * ldc + j], want, 1e-5) << "ta=" << ta << " tb=" << tb;
        }
        // Padding columns past n are untouched.
        for (int64_t j = n; j < ldc; ++j)
          EXPECT_EQ(c[i * ldc + j], static_cast<float>(c0[i * ldc + j]));
      }
    }
  }
}

TEST(LinearTest, ForwardAndBackwardMatchReference) {
  Rng rng(2);
  const int64_t n = 4, in = 6, out = 5;
  Vec x = reference::random_vec(rng, n * in), w = reference::random_vec(rng, in * out),
      b = reference::random_vec(rng, out), probe = reference::random_vec(rng, n * out);
  std::vector<float> y(n * out);
  cpu::linear_forward(to_float(x).data(), to_float(w).data(), to_float(b).data(), n, in, out,
                      y.data());
  EXPECT_LT(rel_error(to_double(y), reference::linear(x, w, b, n, in, out)), kForwardTol);
  // With a residual added onto bias + product (in place: y is the residual).
  Vec r = reference::random_vec(rng, n * out), want = reference::linear(x, w, b, n, in, out);
  for (size_t i = 0; i < want.size(); ++i) want[i] += static_cast<float>(r[i]);
  std::vector<float> yr = to_float(r);
  cpu::linear_forward_residual(to_float(x).data(), to_float(w).data(), to_float(b).data(),
                               yr.data(), n, in, out, yr.data());
  EXPECT_LT(rel_error(to_double(yr), want), kForwardTol);

  std::vector<float> dx(n * in), dw(in * out, 0.0f), db(out, 0.0f);
  cpu::linear_backward(to_float(x).data(), to_float(w).data(), to_float(probe).data(), n, in, out,
                       dx.data(), dw.data(), db.data());
  auto loss_x = [&](const Vec& v) {
    return reference::dot(reference::linear(v, w, b, n, in, out), probe);
  };
  auto loss_w = [&](const Vec& v) {
    return reference::dot(reference::linear(x, v, b, n, in, out), probe);
  };
  auto loss_b = [&](const Vec& v) {
    return reference::dot(reference::linear(x, w, v, n, in, out), probe);
  };
  EXPECT_LT(rel_error(to_double(dx), numeric_grad(loss_x, x)), kGradTol);
  EXPECT_LT(rel_error(to_double(dw), numeric_grad(loss_w, w)), kGradTol);
  EXPECT_LT(rel_error(to_double(db), numeric_grad(loss_b, b)), kGradTol);

  // Parameter gradients accumulate: a second backward doubles them.
  std::vector<float> dw1 = dw;
  cpu::linear_backward(to_float(x).data(), to_float(w).data(), to_float(probe).data(), n, in, out,
                       nullptr, dw.data(), nullptr);
  for (size_t i = 0; i < dw.size(); ++i) EXPECT_NEAR(dw[i], 2 * dw1[i], 1e-5);
}

TEST(LayerNormTest, ForwardAndBackwardMatchReference) {
  for_each_isa([&](cpu::Isa) {
    Rng rng(3);
    const int64_t n = 3, c = 37;  // vector bodies of every width plus a tail
    Vec x = reference::random_vec(rng, n * c, 2.0), g = reference::random_vec(rng, c),
        b = reference::random_vec(rng, c), probe = reference::random_vec(rng, n * c);
    std::vector<float> y(n * c), mean(n), rstd(n);
    cpu::layernorm_forward(to_float(x).data(), to_float(g).data(), to_float(b).data(), n, c,
                           y.data(), mean.data(), rstd.data());
    EXPECT_LT(rel_error(to_double(y), reference::layernorm(x, g, b, n, c)), kForwardTol);

    std::vector<float> dx(n * c), dg(c, 0.0f), dbeta(c, 0.0f);
    cpu::layernorm_backward(to_float(x).data(), to_float(g).data(), mean.data(), rstd.data(),
                            to_float(probe).data(), n, c, dx.data(), dg.data(), dbeta.data());
    auto lx = [&](const Vec& v) {
      return reference::dot(reference::layernorm(v, g, b, n, c), probe);
    };
    auto lg = [&](const Vec& v) {
      return reference::dot(reference::layernorm(x, v, b, n, c), probe);
    };
    auto lb = [&](const Vec& v) {
      return reference::dot(reference::layernorm(x, g, v, n, c), probe);
    };
    EXPECT_LT(rel_error(to_double(dx), numeric_grad(lx, x)), kGradTol);
    EXPECT_LT(rel_error(to_double(dg), numeric_grad(lg, g)), kGradTol);
    EXPECT_LT(rel_error(to_double(dbeta), numeric_grad(lb, b)), kGradTol);

    // accumulate_dx adds the same dx onto what dx held (a residual stream's gradient).
    std::vector<float> acc(n * c, 0.5f), dg2(c, 0.0f), db2(c, 0.0f);
    cpu::layernorm_backward(to_float(x).data(), to_float(g).data(), mean.data(), rstd.data(),
                            to_float(probe).data(), n, c, acc.data(), dg2.data(), db2.data(),
                            /*accumulate_dx=*/true);
    for (int64_t i = 0; i < n * c; ++i) ASSERT_EQ(acc[i], 0.5f + dx[i]) << i;
    EXPECT_EQ(dg2, dg);
    EXPECT_EQ(db2, dbeta);
  });
}

TEST(GeluTest, ForwardAndBackwardMatchReference) {
  for_each_isa([&](cpu::Isa) {
    Rng rng(4);
    const int64_t n = 203;
    Vec x = reference::random_vec(rng, n, 3.0), probe = reference::random_vec(rng, n);
    std::vector<float> y(n), dx(n);
    cpu::gelu_forward(to_float(x).data(), n, y.data());
    EXPECT_LT(rel_error(to_double(y), reference::gelu(x)), kForwardTol);
    cpu::gelu_backward(to_float(x).data(), to_float(probe).data(), n, dx.data());
    auto l = [&](const Vec& v) { return reference::dot(reference::gelu(v), probe); };
    EXPECT_LT(rel_error(to_double(dx), numeric_grad(l, x)), kGradTol);
  });
}

class AttentionTest : public ::testing::TestWithParam<std::array<int64_t, 4>> {};

// Shapes [b, t, h, d]; t = 70 spans two of the kernel's 64-query blocks, t = 131 three (the last
// ragged), with an odd head size.
INSTANTIATE_TEST_SUITE_P(Shapes, AttentionTest,
                         ::testing::Values(std::array<int64_t, 4>{2, 5, 3, 4},
                                           std::array<int64_t, 4>{1, 70, 1, 2},
                                           std::array<int64_t, 4>{1, 131, 1, 3}));

TEST_P(AttentionTest, ForwardAndBackwardMatchReference) {
  for_each_isa([&](cpu::Isa) {
    Rng rng(5);
    const auto [b, t, h, d] = GetParam();
    Vec qkv = reference::random_vec(rng, b * t * 3 * h * d),
        probe = reference::random_vec(rng, b * t * h * d);
    std::vector<float> out(b * t * h * d), lse(b * h * t), dqkv(qkv.size());
    cpu::attention_forward(to_float(qkv).data(), b, t, h, d, out.data(), lse.data());
    EXPECT_LT(rel_error(to_double(out), reference::attention(qkv, b, t, h, d)), kForwardTol);
    EXPECT_LT(rel_error(to_double(lse), reference::attention_logsumexp(qkv, b, t, h, d)),
              kForwardTol);
    cpu::attention_backward(to_float(qkv).data(), lse.data(), to_float(probe).data(), b, t, h, d,
                            dqkv.data());
    auto l = [&](const Vec& v) {
      return reference::dot(reference::attention(v, b, t, h, d), probe);
    };
    EXPECT_LT(rel_error(to_double(dqkv), numeric_grad(l, qkv)), kGradTol);
  });
}

TEST(EmbeddingTest, LookupPositionsAndScatterMatchReference) {
  Rng rng(6);
  const int64_t vocab = 7, c = 3, b = 2, t = 4;
  Vec wte = reference::random_vec(rng, vocab * c), wpe = reference::random_vec(rng, t * c),
      probe = reference::random_vec(rng, b * t * c);
  std::vector<int32_t> tokens = {3, 0, 6, 3, 1, 3, 5, 2};
  auto ref = [&](const Vec& table, const Vec& pos) {
    Vec out(static_cast<size_t>(b * t * c));
    for (int64_t n = 0; n < b * t; ++n)
      for (int64_t j = 0; j < c; ++j)
        out[n * c + j] = table[tokens[n] * c + j] + pos[(n % t) * c + j];
    return out;
  };
  std::vector<float> x(b * t * c), dwte(vocab * c, 0.0f), dwpe(t * c, 0.0f);
  cpu::embedding_forward(tokens.data(), b * t, to_float(wte).data(), vocab, c, {}, x.data());
  cpu::position_forward(to_float(wpe).data(), b, t, c, x.data());
  EXPECT_LT(rel_error(to_double(x), ref(wte, wpe)), kForwardTol);
  cpu::embedding_backward(tokens.data(), b * t, to_float(probe).data(), vocab, c, {}, dwte.data());
  cpu::position_backward(to_float(probe).data(), b, t, c, dwpe.data());
  auto lt = [&](const Vec& v) { return reference::dot(ref(v, wpe), probe); };
  auto lp = [&](const Vec& v) { return reference::dot(ref(wte, v), probe); };
  EXPECT_LT(rel_error(to_double(dwte), numeric_grad(lt, wte)), kGradTol);
  EXPECT_LT(rel_error(to_double(dwpe), numeric_grad(lp, wpe)), kGradTol);

  // A vocabulary shard holding ids {5, 1, 3} (non-contiguous, unordered) sees only its rows; the
  // sum of the lookups of two complementary shards is the full lookup.
  std::vector<int64_t> ids_a = {5, 1, 3}, ids_b = {0, 6, 2, 4};
  std::vector<float> sum(b * t * c, 0.0f);
  for (const auto* ids : {&ids_a, &ids_b}) {
    std::vector<float> table(ids->size() * c), part(b * t * c);
    for (size_t r = 0; r < ids->size(); ++r)
      for (int64_t j = 0; j < c; ++j) table[r * c + j] = static_cast<float>(wte[(*ids)[r] * c + j]);
    const std::vector<int64_t> index = cpu::make_local_index(*ids, vocab);
    cpu::embedding_forward(tokens.data(), b * t, table.data(), static_cast<int64_t>(ids->size()), c,
                           index, part.data());
    for (size_t i = 0; i < sum.size(); ++i) sum[i] += part[i];
  }
  std::vector<float> whole(b * t * c);
  cpu::embedding_forward(tokens.data(), b * t, to_float(wte).data(), vocab, c, {}, whole.data());
  EXPECT_EQ(sum, whole);
}

TEST(CrossEntropyTest, FusedLossAndGradientMatchReference) {
  for_each_isa([&](cpu::Isa) {
    Rng rng(7);
    const int64_t n = 4, v = 9;
    Vec logits = reference::random_vec(rng, n * v, 3.0);
    std::vector<int32_t> y = {0, 8, 3, 3};
    std::vector<float> dlogits(n * v);
    const double loss = cpu::cross_entropy_forward_backward(to_float(logits).data(), n, v, y.data(),
                                                            0.25f, dlogits.data());
    EXPECT_NEAR(loss, reference::cross_entropy_sum(logits, y, n, v), 1e-5);
    auto l = [&](const Vec& x) { return 0.25 * reference::cross_entropy_sum(x, y, n, v); };
    EXPECT_LT(rel_error(to_double(dlogits), numeric_grad(l, logits)), kGradTol);
  });
}

TEST(CrossEntropyTest, VocabularyShardsCombineToTheFullLoss) {
  // Megatron's parallel cross-entropy, simulated: shards hold non-contiguous vocabulary columns,
  // their row statistics combine by max / sum, and each shard's gradient columns equal the
  // matching columns of the full gradient.
  Rng rng(8);
  const int64_t n = 3, v = 8;
  Vec logits = reference::random_vec(rng, n * v, 2.0);
  std::vector<int32_t> y = {1, 6, 4};
  std::vector<float> full_grad(n * v);
  const double full = cpu::cross_entropy_forward_backward(to_float(logits).data(), n, v, y.data(),
                                                          1.0f, full_grad.data());
  const std::vector<std::vector<int64_t>> shards = {{0, 4, 7}, {6, 1}, {2, 3, 5}};
  std::vector<std::vector<float>> local(shards.size());
  std::vector<float> gmax(n, -1e30f), gsum(n, 0.0f), gtarget(n, 0.0f);
  for (size_t s = 0; s < shards.size(); ++s) {
    const int64_t vl = static_cast<int64_t>(shards[s].size());
    local[s].resize(n * vl);
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j < vl; ++j)
        local[s][i * vl + j] = static_cast<float>(logits[i * v + shards[s][j]]);
    std::vector<float> mx(n);
    cpu::row_max(local[s].data(), n, vl, mx.data());
    for (int64_t i = 0; i < n; ++i) gmax[i] = std::max(gmax[i], mx[i]);
  }
  for (size_t s = 0; s < shards.size(); ++s) {
    const int64_t vl = static_cast<int64_t>(shards[s].size());
    std::vector<float> sm(n), tg(n);
    cpu::row_sum_exp(local[s].data(), n, vl, gmax.data(), sm.data());
    cpu::target_logits(local[s].data(), n, vl, y.data(), cpu::make_local_index(shards[s], v),
                       tg.data());
    for (int64_t i = 0; i < n; ++i) {
      gsum[i] += sm[i];
      gtarget[i] += tg[i];
    }
  }
  EXPECT_NEAR(cpu::cross_entropy_loss_sum(n, gmax.data(), gsum.data(), gtarget.data()), full, 1e-5);
  for (size_t s = 0; s < shards.size(); ++s) {
    const int64_t vl = static_cast<int64_t>(shards[s].size());
    std::vector<float> grad(n * vl);
    cpu::cross_entropy_backward(local[s].data(), n, vl, y.data(),
                                cpu::make_local_index(shards[s], v), gmax.data(), gsum.data(), 1.0f,
                                grad.data());
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j < vl; ++j)
        EXPECT_NEAR(grad[i * vl + j], full_grad[i * v + shards[s][j]], 1e-6);
  }
}

}  // namespace
}  // namespace ntp::kernels
