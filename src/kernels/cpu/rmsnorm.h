// RMSNorm over the last dimension, as in Llama (weight, no bias, no mean subtraction):
//   y[n, c] = x[n, c] * rstd[n] * w[c],   rstd[n] = 1 / sqrt(mean_c(x[n, :]^2) + eps)
// Forward saves rstd[N] for the backward pass.
// Backward, given dy[N, C]: with xhat = x * rstd and g = dy * w,
//   dx = rstd * (g - xhat * mean_c(g * xhat))
// dx overwritten (or added to with accumulate_dx: a residual branch joining the stream's
// gradient); dw[C] accumulated. Row statistics are summed in double (as LayerNorm's).
#pragma once

#include <cstdint>

namespace ntp::kernels::cpu {

void rmsnorm_forward(const float* x, const float* w, int64_t n, int64_t c, float eps, float* y,
                     float* rstd);

void rmsnorm_backward(const float* x, const float* w, const float* rstd, const float* dy, int64_t n,
                      int64_t c, float* dx, float* dw, bool accumulate_dx = false);

}  // namespace ntp::kernels::cpu
