// The Llama ops (RMSNorm, RoPE, SwiGLU) against float64 references (llama_reference.h) and
// central finite differences of those references, for every ISA variant the host runs, at odd
// sizes (vector bodies of every width plus tails; odd half head sizes; strided rows).
// Tolerances: each float32 output element is a handful of roundings (2^-24 ~ 6e-8 each) of
// float32-rounded inputs, so errors relative to the norm of the float64 result come out at 4e-8 to
// 1e-7 (measured); 1e-6 leaves ten times that. Central differences of the float64 reference with
// h = 1e-5 are exact to ~1e-10 (truncation h^2 f'''/6 and cancellation 1e-16 / h), so the float32
// backward is held to the same 1e-6 (measured 4e-8 to 9e-8).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <string>

#include "isa_variants.h"
#include "kernels/cpu/rmsnorm.h"
#include "kernels/cpu/rope.h"
#include "kernels/cpu/swiglu.h"
#include "llama_reference.h"
#include "reference.h"

namespace ntp::kernels {
namespace {

using namespace reference;  // float64 references and finite differences (reference.h)

constexpr double kForwardTol = 1e-6;
constexpr double kGradTol = 1e-6;

// EXPECT_LT(error, tolerance), printing the measured error (the figures docs/model.md quotes).
void expect_below(const char* what, double error, double tolerance) {
  std::printf("  %-28s rel. error %.2e (limit %.0e)\n", what, error, tolerance);
  EXPECT_LT(error, tolerance) << what;
}

TEST(RmsNormTest, ForwardAndBackwardMatchReference) {
  for_each_isa([&](cpu::Isa) {
    Rng rng(31);
    const int64_t n = 3, c = 37;
    const float eps = 1e-6f;
    Vec x = reference::random_vec(rng, n * c, 2.0), w = reference::random_vec(rng, c),
        probe = reference::random_vec(rng, n * c);
    std::vector<float> y(n * c), rstd(n);
    cpu::rmsnorm_forward(to_float(x).data(), to_float(w).data(), n, c, eps, y.data(), rstd.data());
    expect_below("rmsnorm forward", rel_error(to_double(y), reference::rmsnorm(x, w, n, c, eps)),
                 kForwardTol);

    std::vector<float> dx(n * c), dw(c, 0.0f);
    cpu::rmsnorm_backward(to_float(x).data(), to_float(w).data(), rstd.data(),
                          to_float(probe).data(), n, c, dx.data(), dw.data());
    auto lx = [&](const Vec& v) {
      return reference::dot(reference::rmsnorm(v, w, n, c, eps), probe);
    };
    auto lw = [&](const Vec& v) {
      return reference::dot(reference::rmsnorm(x, v, n, c, eps), probe);
    };
    expect_below("rmsnorm dx", rel_error(to_double(dx), numeric_grad(lx, x)), kGradTol);
    expect_below("rmsnorm dw", rel_error(to_double(dw), numeric_grad(lw, w)), kGradTol);

    // accumulate_dx adds onto what is there; dw accumulates over calls.
    std::vector<float> dx2(n * c, 1.0f);
    cpu::rmsnorm_backward(to_float(x).data(), to_float(w).data(), rstd.data(),
                          to_float(probe).data(), n, c, dx2.data(), dw.data(), true);
    for (int64_t i = 0; i < n * c; ++i) EXPECT_FLOAT_EQ(dx2[i], 1.0f + dx[i]);
    Vec dw_fd = numeric_grad(lw, w);
    for (double& v : dw_fd) v *= 2.0;
    expect_below("rmsnorm dw accumulated", rel_error(to_double(dw), dw_fd), kGradTol);
  });
}

TEST(RmsNormTest, EpsIsConfigurable) {
  // A row of zeros but one tiny value: the result depends on eps visibly.
  const int64_t c = 5;
  std::vector<float> x(c, 0.0f), w(c, 1.0f), y(c), rstd(1);
  x[2] = 1e-3f;
  for (float eps : {1e-5f, 1e-6f}) {
    cpu::rmsnorm_forward(x.data(), w.data(), 1, c, eps, y.data(), rstd.data());
    const double want = 1e-3 / std::sqrt(1e-6 / c + static_cast<double>(eps));
    EXPECT_NEAR(y[2], want, 1e-6 * want) << "eps " << eps;
  }
}

TEST(RopeTest, PairsEachElementWithTheOneHalfAHeadAway) {
  // d = 4, theta = 10000: inv_freq = [1, 0.01]. A unit vector in element 0 at position 1 rotates
  // into element 2 (= 0 + d/2), not element 1 (the interleaved layout would put it there).
  const int64_t t = 2, d = 4;
  std::vector<float> cos(t * d / 2), sin(t * d / 2);
  cpu::rope_tables(t, d, 10000.0, cos.data(), sin.data());
  std::vector<float> x = {1, 0, 0, 0, /*pos 1:*/ 1, 0, 0, 0};
  cpu::rope_forward(x.data(), 1, t, 1, d, d, cos.data(), sin.data());
  EXPECT_FLOAT_EQ(x[0], 1.0f);  // position 0: identity
  EXPECT_FLOAT_EQ(x[2], 0.0f);
  EXPECT_FLOAT_EQ(x[4], static_cast<float>(std::cos(1.0)));
  EXPECT_FLOAT_EQ(x[5], 0.0f);
  EXPECT_FLOAT_EQ(x[6], static_cast<float>(std::sin(1.0)));
  EXPECT_FLOAT_EQ(x[7], 0.0f);
}

TEST(RopeTest, ForwardAndBackwardMatchReferenceOnStridedRows) {
  for_each_isa([&](cpu::Isa) {
    for (int64_t d : {6, 10}) {  // odd half sizes 3 and 5
      SCOPED_TRACE("head size " + std::to_string(d));
      Rng rng(32);
      const int64_t b = 2, t = 7, h = 3, ld = h * d + 5;  // 5 untouched values per row
      const double theta = 500000.0;                      // Llama 3's
      Vec x = reference::random_vec(rng, b * t * ld),
          probe = reference::random_vec(rng, b * t * ld);
      std::vector<float> cos(t * d / 2), sin(t * d / 2);
      cpu::rope_tables(t, d, theta, cos.data(), sin.data());
      std::vector<float> y = to_float(x);
      cpu::rope_forward(y.data(), b, t, h, d, ld, cos.data(), sin.data());
      expect_below("rope forward",
                   rel_error(to_double(y), reference::rope(x, b * t, t, h, d, ld, theta)),
                   kForwardTol);

      std::vector<float> g = to_float(probe);
      cpu::rope_backward(g.data(), b, t, h, d, ld, cos.data(), sin.data());
      auto lx = [&](const Vec& v) {
        return reference::dot(reference::rope(v, b * t, t, h, d, ld, theta), probe);
      };
      expect_below("rope backward", rel_error(to_double(g), numeric_grad(lx, x)), kGradTol);
    }
  });
}

TEST(SwigluTest, ForwardAndBackwardMatchReference) {
  for_each_isa([&](cpu::Isa) {
    Rng rng(33);
    const int64_t n = 3, f = 37;
    Vec gu = reference::random_vec(rng, n * 2 * f, 3.0), probe = reference::random_vec(rng, n * f);
    std::vector<float> out(n * f);
    cpu::swiglu_forward(to_float(gu).data(), n, f, out.data());
    expect_below("swiglu forward", rel_error(to_double(out), reference::swiglu(gu, n, f)),
                 kForwardTol);

    std::vector<float> dgu(n * 2 * f);
    cpu::swiglu_backward(to_float(gu).data(), to_float(probe).data(), n, f, dgu.data());
    auto l = [&](const Vec& v) { return reference::dot(reference::swiglu(v, n, f), probe); };
    expect_below("swiglu backward", rel_error(to_double(dgu), numeric_grad(l, gu)), kGradTol);
  });
}

TEST(SwigluTest, SaturatesWithoutOverflow) {
  // silu(-100) -> 0, silu(100) -> 100 (fast_exp clamps; no inf or NaN). The up value 0.01 makes
  // out[0] = -100 x 0.01 x sigmoid(-100) = -sigmoid(-100): a sigmoid saturating below 1.2e-38
  // (the old 1 / (1 + exp(88)) = 6e-39) would show as a subnormal output.
  std::vector<float> gu = {-100.0f, 100.0f, 0.01f, 3.0f}, out(2), dgu(4), dout = {1.0f, 1.0f};
  cpu::swiglu_forward(gu.data(), 1, 2, out.data());
  cpu::swiglu_backward(gu.data(), dout.data(), 1, 2, dgu.data());
  EXPECT_NEAR(out[0], 0.0f, 1e-30f);
  // sigmoid saturates at exp(-87) = 1.6e-38, a normal float; so is the gate's gradient,
  // 0.01 x sigmoid x (1 - 100 (1 - sigmoid)) = -0.99 sigmoid.
  EXPECT_EQ(std::fpclassify(out[0]), FP_NORMAL);
  EXPECT_EQ(std::fpclassify(dgu[0]), FP_NORMAL);
  EXPECT_FLOAT_EQ(out[1], 300.0f);
  for (float v : dgu) EXPECT_TRUE(std::isfinite(v));
  EXPECT_FLOAT_EQ(dgu[1], 3.0f);  // d/dgate of silu(gate) * up at large gate: up
}

}  // namespace
}  // namespace ntp::kernels
