#include "kernels/cpu/layernorm.h"

#include <algorithm>
#include <cmath>

#include "kernels/cpu/isa_dispatch.h"
#include "kernels/cpu/lane_sum.h"
#include "kernels/cpu/parallel.h"

namespace ntp::kernels::cpu {
namespace {

NTP_ISA_INLINE void layernorm_forward_body(const float* x, const float* gamma, const float* beta,
                                           int64_t n, int64_t c, float* y, float* mean,
                                           float* rstd) {
  for (int64_t i = 0; i < n; ++i) {
    const float* xr = x + i * c;
    const double sum = lane_sum<double>(c, [xr](int64_t j) { return static_cast<double>(xr[j]); });
    const double mu = sum / static_cast<double>(c);
    const double sq = lane_sum<double>(c, [xr, mu](int64_t j) {
      const double d = xr[j] - mu;
      return d * d;
    });
    const double rs = 1.0 / std::sqrt(sq / static_cast<double>(c) + kLayerNormEps);
    const float muf = static_cast<float>(mu);
    const float rsf = static_cast<float>(rs);
    float* yr = y + i * c;
    for (int64_t j = 0; j < c; ++j) yr[j] = (xr[j] - muf) * rsf * gamma[j] + beta[j];
    mean[i] = muf;
    rstd[i] = rsf;
  }
}
NTP_ISA_VARIANTS(layernorm_forward_isa, layernorm_forward_body)

// dgamma[j] += dy[j] xhat[j] and dbeta[j] += dy[j] for columns [0, cols) of one row, with
// xhat = (x - mu) * rs.
NTP_ISA_INLINE void add_row_dgamma_dbeta(const float* xr, const float* dyr, float mu, float rs,
                                         int64_t cols, float* dgamma, float* dbeta) {
  for (int64_t j = 0; j < cols; ++j) {
    const float xhat = (xr[j] - mu) * rs;
    dgamma[j] += dyr[j] * xhat;
    dbeta[j] += dyr[j];
  }
}

NTP_ISA_INLINE void layernorm_backward_body(const float* x, const float* gamma, const float* mean,
                                            const float* rstd, const float* dy, int64_t n,
                                            int64_t c, float* dx, bool accumulate_dx, float* dgamma,
                                            float* dbeta) {
  // With xhat = (x - mean) * rstd and g = dy * gamma:
  //   dx = rstd * (g - mean_c(g) - xhat * mean_c(g * xhat))
  for (int64_t i = 0; i < n; ++i) {
    const float* xr = x + i * c;
    const float* dyr = dy + i * c;
    const float mu = mean[i];
    const float rs = rstd[i];
    if (dgamma != nullptr) add_row_dgamma_dbeta(xr, dyr, mu, rs, c, dgamma, dbeta);
    if (dx == nullptr) continue;
    const double sum_g =
        lane_sum<double>(c, [dyr, gamma](int64_t j) { return double{dyr[j] * gamma[j]}; });
    const double sum_gx = lane_sum<double>(c, [=](int64_t j) {
      const float xhat = (xr[j] - mu) * rs;
      return static_cast<double>(dyr[j] * gamma[j]) * xhat;
    });
    const float mean_g = static_cast<float>(sum_g / static_cast<double>(c));
    const float mean_gx = static_cast<float>(sum_gx / static_cast<double>(c));
    float* dxr = dx + i * c;
    if (accumulate_dx) {
      for (int64_t j = 0; j < c; ++j) {
        const float xhat = (xr[j] - mu) * rs;
        dxr[j] += rs * (dyr[j] * gamma[j] - mean_g - xhat * mean_gx);
      }
    } else {
      for (int64_t j = 0; j < c; ++j) {
        const float xhat = (xr[j] - mu) * rs;
        dxr[j] = rs * (dyr[j] * gamma[j] - mean_g - xhat * mean_gx);
      }
    }
  }
}
NTP_ISA_VARIANTS(layernorm_backward_isa, layernorm_backward_body)

// dgamma, dbeta of columns [0, cols) of row-major x, dy with leading dimension ld: the same
// operations in the same row order as layernorm_backward_body.
NTP_ISA_INLINE void layernorm_backward_columns_body(const float* x, const float* mean,
                                                    const float* rstd, const float* dy, int64_t n,
                                                    int64_t cols, int64_t ld, float* dgamma,
                                                    float* dbeta) {
  for (int64_t i = 0; i < n; ++i) {
    add_row_dgamma_dbeta(x + i * ld, dy + i * ld, mean[i], rstd[i], cols, dgamma, dbeta);
  }
}
NTP_ISA_VARIANTS(layernorm_backward_columns_isa, layernorm_backward_columns_body)

}  // namespace

void layernorm_forward(const float* x, const float* gamma, const float* beta, int64_t n, int64_t c,
                       float* y, float* mean, float* rstd) {
  // Rows are independent: split them over the threads.
  parallel_for(n, std::max<int64_t>(1, 4096 / std::max<int64_t>(1, c)),
               [=](int64_t r0, int64_t r1) {
                 layernorm_forward_isa(x + r0 * c, gamma, beta, r1 - r0, c, y + r0 * c, mean + r0,
                                       rstd + r0);
               });
}

void layernorm_backward(const float* x, const float* gamma, const float* mean, const float* rstd,
                        const float* dy, int64_t n, int64_t c, float* dx, float* dgamma,
                        float* dbeta, bool accumulate_dx) {
  if (kernel_threads() == 1 || n * c < 65536) {
    layernorm_backward_isa(x, gamma, mean, rstd, dy, n, c, dx, accumulate_dx, dgamma, dbeta);
    return;
  }
  // dx row by row over row ranges; dgamma and dbeta over column ranges, each summed over all rows
  // in row order as above (the same bits as the single pass).
  parallel_for(n, std::max<int64_t>(1, 4096 / c), [=](int64_t r0, int64_t r1) {
    layernorm_backward_isa(x + r0 * c, gamma, mean + r0, rstd + r0, dy + r0 * c, r1 - r0, c,
                           dx + r0 * c, accumulate_dx, static_cast<float*>(nullptr),
                           static_cast<float*>(nullptr));
  });
  parallel_for(c, 64, [=](int64_t c0, int64_t c1) {
    layernorm_backward_columns_isa(x + c0, mean, rstd, dy + c0, n, c1 - c0, c, dgamma + c0,
                                   dbeta + c0);
  });
}

}  // namespace ntp::kernels::cpu
