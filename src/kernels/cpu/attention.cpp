#include "kernels/cpu/attention.h"

#include <cmath>
#include <vector>

#include "kernels/cpu/gemm.h"

namespace ntp::kernels::cpu {

void attention_forward(const float* qkv, int64_t b, int64_t t, int64_t h, int64_t d, float* out,
                       float* probs) {
  const int64_t hd = h * d;
  const int64_t row = 3 * hd;
  const float scale = 1.0f / std::sqrt(static_cast<float>(d));
  for (int64_t bi = 0; bi < b; ++bi) {
    for (int64_t hi = 0; hi < h; ++hi) {
      const float* q = qkv + bi * t * row + hi * d;
      const float* k = q + hd;
      const float* v = q + 2 * hd;
      float* p = probs + (bi * h + hi) * t * t;
      gemm(false, true, t, t, d, scale, q, row, k, row, 0.0f, p, t);
      for (int64_t i = 0; i < t; ++i) {
        float* pr = p + i * t;
        float mx = pr[0];
        for (int64_t j = 1; j <= i; ++j) mx = pr[j] > mx ? pr[j] : mx;
        float sum = 0.0f;
        for (int64_t j = 0; j <= i; ++j) {
          pr[j] = std::exp(pr[j] - mx);
          sum += pr[j];
        }
        const float inv = 1.0f / sum;
        for (int64_t j = 0; j <= i; ++j) pr[j] *= inv;
        for (int64_t j = i + 1; j < t; ++j) pr[j] = 0.0f;
      }
      gemm(false, false, t, d, t, 1.0f, p, t, v, row, 0.0f, out + bi * t * hd + hi * d, hd);
    }
  }
}

void attention_backward(const float* qkv, const float* probs, const float* dout, int64_t b,
                        int64_t t, int64_t h, int64_t d, float* dqkv) {
  const int64_t hd = h * d;
  const int64_t row = 3 * hd;
  const float scale = 1.0f / std::sqrt(static_cast<float>(d));
  std::vector<float> ds(static_cast<size_t>(t * t));
  for (int64_t bi = 0; bi < b; ++bi) {
    for (int64_t hi = 0; hi < h; ++hi) {
      const float* q = qkv + bi * t * row + hi * d;
      const float* k = q + hd;
      const float* v = q + 2 * hd;
      float* dq = dqkv + bi * t * row + hi * d;
      float* dk = dq + hd;
      float* dv = dq + 2 * hd;
      const float* p = probs + (bi * h + hi) * t * t;
      const float* dout_bh = dout + bi * t * hd + hi * d;
      // dP = dO V^T; dV = P^T dO.
      gemm(false, true, t, t, d, 1.0f, dout_bh, hd, v, row, 0.0f, ds.data(), t);
      gemm(true, false, t, d, t, 1.0f, p, t, dout_bh, hd, 0.0f, dv, row);
      // Softmax backward: dS = P * (dP - sum_j P dP), zero above the diagonal.
      for (int64_t i = 0; i < t; ++i) {
        const float* pr = p + i * t;
        float* dr = ds.data() + i * t;
        float dot = 0.0f;
        for (int64_t j = 0; j <= i; ++j) dot += pr[j] * dr[j];
        for (int64_t j = 0; j <= i; ++j) dr[j] = pr[j] * (dr[j] - dot);
        for (int64_t j = i + 1; j < t; ++j) dr[j] = 0.0f;
      }
      // dQ = scale * dS K; dK = scale * dS^T Q.
      gemm(false, false, t, d, t, scale, ds.data(), t, k, row, 0.0f, dq, row);
      gemm(true, false, t, d, t, scale, ds.data(), t, q, row, 0.0f, dk, row);
    }
  }
}

}  // namespace ntp::kernels::cpu
