// LayerNorm over the last dimension, as in GPT-2 (eps = 1e-5, biased variance):
//   y[n, c] = (x[n, c] - mean[n]) * rstd[n] * gamma[c] + beta[c]
//   rstd[n] = 1 / sqrt(var[n] + eps)
// Forward saves mean[N] and rstd[N] for the backward pass.
// Backward, given dy[N, C]: dx overwritten (or, with accumulate_dx, added to: a residual branch's
// gradient joining the stream's, without a pass of its own); dgamma[C], dbeta[C] accumulated.
// Statistics are computed in double so the float32 kernel stays close to the float64 reference.
#pragma once

#include <cstdint>

namespace ntp::kernels::cpu {

inline constexpr float kLayerNormEps = 1e-5f;

void layernorm_forward(const float* x, const float* gamma, const float* beta, int64_t n, int64_t c,
                       float* y, float* mean, float* rstd);

void layernorm_backward(const float* x, const float* gamma, const float* mean, const float* rstd,
                        const float* dy, int64_t n, int64_t c, float* dx, float* dgamma,
                        float* dbeta, bool accumulate_dx = false);

}  // namespace ntp::kernels::cpu
