// fast_exp: a branch-free, inlinable expf that compilers vectorize (glibc's expf is an opaque call,
// so loops over it stay scalar). Cephes' polynomial with Cody-Waite range reduction.
//
// Contract: for x in [-87, 88] the relative error is below 3e-7 (a few ulp); x is clamped to that
// range first, so very negative x gives ~1.6e-38 instead of 0 or a denormal, and large x gives
// ~1.65e38 instead of inf. Callers (softmax, GELU's tanh) only need those saturations.
#pragma once

#include <algorithm>
#include <bit>
#include <cstdint>

namespace ntp::kernels::cpu {

[[gnu::always_inline]] inline float fast_exp(float x) {
  x = x < -87.0f ? -87.0f : x;  // ternaries on values, not std::min/max references: if-converted
  x = x > 88.0f ? 88.0f : x;
  // n = round(x / ln 2) by the 1.5 * 2^23 trick (SSE2 has no vector round instruction).
  constexpr float kRound = 12582912.0f;
  const float n = (x * 1.44269504088896341f + kRound) - kRound;
  // r = x - n ln 2, with ln 2 split in two so the product is exact.
  const float r = (x - n * 0.693359375f) + n * 2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  const auto biased = static_cast<int32_t>(n) + 127;  // in [1, 254] after the clamp
  return p * std::bit_cast<float>(static_cast<uint32_t>(biased) << 23);
}

}  // namespace ntp::kernels::cpu
