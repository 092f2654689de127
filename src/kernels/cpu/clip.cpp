#include "kernels/cpu/clip.h"

#include "core/check.h"
#include "kernels/cpu/isa_dispatch.h"

namespace ntp::kernels::cpu {
namespace {
NTP_ISA_INLINE void scale_body(float* x, int64_t n, float factor) {
  for (int64_t i = 0; i < n; ++i) x[i] *= factor;
}
NTP_ISA_VARIANTS(scale_isa, scale_body)
}  // namespace

double sum_of_squares(const float* x, int64_t n) {
  double s = 0.0;
  for (int64_t i = 0; i < n; ++i) s += static_cast<double>(x[i]) * x[i];
  return s;
}

float clip_coefficient(double global_norm, double max_norm) {
  NTP_CHECK(max_norm > 0.0);
  const double c = max_norm / (global_norm + 1e-6);
  return c < 1.0 ? static_cast<float>(c) : 1.0f;
}

void scale_in_place(float* x, int64_t n, float factor) { scale_isa(x, n, factor); }

}  // namespace ntp::kernels::cpu
