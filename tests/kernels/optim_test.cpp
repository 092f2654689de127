// AdamW and global-norm clipping against plain float64 re-derivations of their definitions.
#include <gtest/gtest.h>

#include <cmath>

#include "kernels/cpu/adamw.h"
#include "kernels/cpu/clip.h"
#include "kernels/cpu/fast_exp.h"
#include "reference.h"

namespace ntp::kernels {
namespace {

using reference::to_float;
using reference::Vec;

TEST(AdamWTest, ThreeStepsMatchFloat64Definition) {
  Rng rng(11);
  const int64_t n = 16;
  cpu::AdamWHyper hp{
      .lr = 1e-2f, .beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f, .weight_decay = 0.1f};
  Vec p = reference::random_vec(rng, n), m(n, 0.0), v(n, 0.0);
  std::vector<float> pf = to_float(p), mf(n, 0.0f), vf(n, 0.0f);
  for (int64_t step = 1; step <= 3; ++step) {
    Vec g = reference::random_vec(rng, n);
    cpu::adamw_step(pf.data(), to_float(g).data(), mf.data(), vf.data(), n, step, hp);
    const double b1 = hp.beta1, b2 = hp.beta2;
    for (int64_t i = 0; i < n; ++i) {
      const double gi = static_cast<float>(g[i]);
      m[i] = b1 * m[i] + (1 - b1) * gi;
      v[i] = b2 * v[i] + (1 - b2) * gi * gi;
      const double mhat = m[i] / (1 - std::pow(b1, static_cast<double>(step)));
      const double vhat = v[i] / (1 - std::pow(b2, static_cast<double>(step)));
      p[i] -= hp.lr * (mhat / (std::sqrt(vhat) + hp.eps) + hp.weight_decay * p[i]);
    }
  }
  for (int64_t i = 0; i < n; ++i) EXPECT_NEAR(pf[i], p[i], 1e-5) << i;
}

TEST(AdamWTest, DecayIsDecoupledFromTheGradient) {
  // Zero gradient: Adam's update is 0/(0+eps) = 0, so only decay acts: p *= (1 - lr * wd).
  std::vector<float> p = {2.0f, -4.0f}, g = {0.0f, 0.0f}, m(2, 0.0f), v(2, 0.0f);
  cpu::adamw_step(p.data(), g.data(), m.data(), v.data(), 2, 1,
                  {.lr = 0.1f, .beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f, .weight_decay = 0.5f});
  EXPECT_FLOAT_EQ(p[0], 2.0f * 0.95f);
  EXPECT_FLOAT_EQ(p[1], -4.0f * 0.95f);
}

TEST(ClipTest, NormAndCoefficientMatchDefinition) {
  Rng rng(12);
  Vec a = reference::random_vec(rng, 10), b = reference::random_vec(rng, 7);
  double want = 0.0;
  for (double x : a) want += static_cast<double>(static_cast<float>(x)) * static_cast<float>(x);
  for (double x : b) want += static_cast<double>(static_cast<float>(x)) * static_cast<float>(x);
  std::vector<float> af = to_float(a), bf = to_float(b);
  const double norm =
      std::sqrt(cpu::sum_of_squares(af.data(), 10) + cpu::sum_of_squares(bf.data(), 7));
  EXPECT_NEAR(norm, std::sqrt(want), 1e-12);
  const float coef = cpu::clip_coefficient(norm, 1.0);
  ASSERT_LT(coef, 1.0f);  // norm of 17 standard normals is ~4
  cpu::scale_in_place(af.data(), 10, coef);
  cpu::scale_in_place(bf.data(), 7, coef);
  const double clipped =
      std::sqrt(cpu::sum_of_squares(af.data(), 10) + cpu::sum_of_squares(bf.data(), 7));
  EXPECT_NEAR(clipped, 1.0, 1e-5);
  EXPECT_EQ(cpu::clip_coefficient(0.5, 1.0), 1.0f);  // below the limit: untouched
}

}  // namespace
}  // namespace ntp::kernels

namespace ntp::kernels {
namespace {

TEST(FastExpTest, RelativeErrorBelowThreeUlpOverTheClampRange) {
  double worst = 0.0;
  for (int i = 0; i < 175000; ++i) {  // x in [-87, 88)
    const float x = -87.0f + 0.001f * static_cast<float>(i);
    const double want = std::exp(static_cast<double>(x));
    worst = std::max(worst, std::abs(cpu::fast_exp(x) - want) / want);
  }
  EXPECT_LT(worst, 3e-7);
  // Saturation instead of 0 / inf (what softmax and GELU's tanh rely on).
  EXPECT_GT(cpu::fast_exp(-1000.0f), 0.0f);
  EXPECT_LT(cpu::fast_exp(-1000.0f), 1e-37f);
  EXPECT_TRUE(std::isfinite(cpu::fast_exp(1000.0f)));
  EXPECT_GT(cpu::fast_exp(1000.0f), 1e38f);
  EXPECT_EQ(cpu::fast_exp(0.0f), 1.0f);
}

}  // namespace
}  // namespace ntp::kernels
