#include "kernels/cpu/rmsnorm.h"

#include <algorithm>
#include <cmath>

#include "kernels/cpu/isa_dispatch.h"
#include "kernels/cpu/lane_sum.h"
#include "kernels/cpu/parallel.h"

namespace ntp::kernels::cpu {
namespace {

NTP_ISA_INLINE void rmsnorm_forward_body(const float* x, const float* w, int64_t n, int64_t c,
                                         float eps, float* y, float* rstd) {
  for (int64_t i = 0; i < n; ++i) {
    const float* xr = x + i * c;
    const double sq = lane_sum<double>(c, [xr](int64_t j) {
      const double v = xr[j];
      return v * v;
    });
    const float rs = static_cast<float>(1.0 / std::sqrt(sq / static_cast<double>(c) + eps));
    float* yr = y + i * c;
    for (int64_t j = 0; j < c; ++j) yr[j] = xr[j] * rs * w[j];
    rstd[i] = rs;
  }
}
NTP_ISA_VARIANTS(rmsnorm_forward_isa, rmsnorm_forward_body)

// dx of rows [0, n) (dw untouched).
NTP_ISA_INLINE void rmsnorm_backward_dx_body(const float* x, const float* w, const float* rstd,
                                             const float* dy, int64_t n, int64_t c, float* dx,
                                             bool accumulate_dx) {
  for (int64_t i = 0; i < n; ++i) {
    const float* xr = x + i * c;
    const float* dyr = dy + i * c;
    const float rs = rstd[i];
    const double sum_gx = lane_sum<double>(c, [=](int64_t j) {
      return static_cast<double>(dyr[j] * w[j]) * static_cast<double>(xr[j] * rs);
    });
    const float mean_gx = static_cast<float>(sum_gx / static_cast<double>(c));
    float* dxr = dx + i * c;
    if (accumulate_dx) {
      for (int64_t j = 0; j < c; ++j) dxr[j] += rs * (dyr[j] * w[j] - xr[j] * rs * mean_gx);
    } else {
      for (int64_t j = 0; j < c; ++j) dxr[j] = rs * (dyr[j] * w[j] - xr[j] * rs * mean_gx);
    }
  }
}
NTP_ISA_VARIANTS(rmsnorm_backward_dx_isa, rmsnorm_backward_dx_body)

// dw of columns [0, cols) of rows with leading dimension ld, summed over all rows in row order
// (so the result does not depend on how columns are split over threads).
NTP_ISA_INLINE void rmsnorm_backward_dw_body(const float* x, const float* rstd, const float* dy,
                                             int64_t n, int64_t cols, int64_t ld, float* dw) {
  for (int64_t i = 0; i < n; ++i) {
    const float* xr = x + i * ld;
    const float* dyr = dy + i * ld;
    const float rs = rstd[i];
    for (int64_t j = 0; j < cols; ++j) dw[j] += dyr[j] * (xr[j] * rs);
  }
}
NTP_ISA_VARIANTS(rmsnorm_backward_dw_isa, rmsnorm_backward_dw_body)

}  // namespace

void rmsnorm_forward(const float* x, const float* w, int64_t n, int64_t c, float eps, float* y,
                     float* rstd) {
  // Rows are independent: split them over the threads.
  parallel_for(n, std::max<int64_t>(1, 4096 / std::max<int64_t>(1, c)),
               [=](int64_t r0, int64_t r1) {
                 rmsnorm_forward_isa(x + r0 * c, w, r1 - r0, c, eps, y + r0 * c, rstd + r0);
               });
}

void rmsnorm_backward(const float* x, const float* w, const float* rstd, const float* dy, int64_t n,
                      int64_t c, float* dx, float* dw, bool accumulate_dx) {
  if (dx != nullptr) {
    parallel_for(n, std::max<int64_t>(1, 4096 / std::max<int64_t>(1, c)),
                 [=](int64_t r0, int64_t r1) {
                   rmsnorm_backward_dx_isa(x + r0 * c, w, rstd + r0, dy + r0 * c, r1 - r0, c,
                                           dx + r0 * c, accumulate_dx);
                 });
  }
  if (dw != nullptr) {
    parallel_for(c, 64, [=](int64_t c0, int64_t c1) {
      rmsnorm_backward_dw_isa(x + c0, rstd, dy + c0, n, c1 - c0, c, dw + c0);
    });
  }
}

}  // namespace ntp::kernels::cpu
