#include "kernels/cpu/rope.h"

#include <algorithm>
#include <cmath>

#include "core/check.h"
#include "kernels/cpu/isa_dispatch.h"
#include "kernels/cpu/parallel.h"

namespace ntp::kernels::cpu {
namespace {

// sign = +1: forward rotation by +angle; sign = -1: the inverse (backward).
NTP_ISA_INLINE void rope_rows_body(float* x, int64_t r0, int64_t r1, int64_t t, int64_t h,
                                   int64_t d, int64_t ld, const float* cos, const float* sin,
                                   float sign) {
  const int64_t half = d / 2;
  for (int64_t r = r0; r < r1; ++r) {
    const float* c = cos + (r % t) * half;
    const float* s = sin + (r % t) * half;
    for (int64_t head = 0; head < h; ++head) {
      float* x1 = x + r * ld + head * d;
      float* x2 = x1 + half;
      for (int64_t i = 0; i < half; ++i) {
        const float a = x1[i], b = x2[i], sn = sign * s[i];
        x1[i] = a * c[i] - b * sn;
        x2[i] = b * c[i] + a * sn;
      }
    }
  }
}
NTP_ISA_VARIANTS(rope_rows_isa, rope_rows_body)

void rope_apply(float* x, int64_t b, int64_t t, int64_t h, int64_t d, int64_t ld, const float* cos,
                const float* sin, float sign) {
  NTP_CHECK(d % 2 == 0 && ld >= h * d);
  // Rows are independent.
  parallel_for(
      b * t, std::max<int64_t>(1, 8192 / std::max<int64_t>(1, h * d)),
      [=](int64_t r0, int64_t r1) { rope_rows_isa(x, r0, r1, t, h, d, ld, cos, sin, sign); });
}

}  // namespace

void rope_tables(int64_t t, int64_t d, double theta, float* cos, float* sin) {
  NTP_CHECK(d % 2 == 0 && theta > 0.0);
  const int64_t half = d / 2;
  for (int64_t i = 0; i < half; ++i) {
    const double inv_freq = std::pow(theta, -2.0 * static_cast<double>(i) / static_cast<double>(d));
    for (int64_t p = 0; p < t; ++p) {
      const double angle = static_cast<double>(p) * inv_freq;
      cos[p * half + i] = static_cast<float>(std::cos(angle));
      sin[p * half + i] = static_cast<float>(std::sin(angle));
    }
  }
}

void rope_forward(float* x, int64_t b, int64_t t, int64_t h, int64_t d, int64_t ld,
                  const float* cos, const float* sin) {
  rope_apply(x, b, t, h, d, ld, cos, sin, 1.0f);
}

void rope_backward(float* dy, int64_t b, int64_t t, int64_t h, int64_t d, int64_t ld,
                   const float* cos, const float* sin) {
  rope_apply(dy, b, t, h, d, ld, cos, sin, -1.0f);
}

}  // namespace ntp::kernels::cpu
