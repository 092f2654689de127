#include "kernels/cpu/clip.h"

#include "core/check.h"
#include "kernels/cpu/isa_dispatch.h"
#include "kernels/cpu/lane_sum.h"

namespace ntp::kernels::cpu {
namespace {
NTP_ISA_INLINE void scale_body(float* x, int64_t n, float factor) {
  for (int64_t i = 0; i < n; ++i) x[i] *= factor;
}
NTP_ISA_VARIANTS(scale_isa, scale_body)

// lane_sum: vectorized, and the same result in every ISA variant.
NTP_ISA_INLINE double sum_of_squares_body(const float* x, int64_t n) {
  return lane_sum<double>(n, [x](int64_t i) {
    const double v = x[i];
    return v * v;
  });
}
NTP_ISA_VARIANTS(sum_of_squares_isa, sum_of_squares_body)
}  // namespace

double sum_of_squares(const float* x, int64_t n) { return sum_of_squares_isa(x, n); }

float clip_coefficient(double global_norm, double max_norm) {
  NTP_CHECK(max_norm > 0.0);
  const double c = max_norm / (global_norm + 1e-6);
  return c < 1.0 ? static_cast<float>(c) : 1.0f;
}

void scale_in_place(float* x, int64_t n, float factor) { scale_isa(x, n, factor); }

}  // namespace ntp::kernels::cpu
