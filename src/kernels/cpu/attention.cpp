#include "kernels/cpu/attention.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "kernels/cpu/fast_exp.h"
#include "kernels/cpu/gemm.h"

namespace ntp::kernels::cpu {

// Products are done in row blocks of kBlock queries: block [i0, i1) only needs keys [0, i1), so
// the masked upper triangle is mostly skipped (about 40% fewer FLOPs at T = 256).
constexpr int64_t kBlock = 64;

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
      for (int64_t i0 = 0; i0 < t; i0 += kBlock) {
        const int64_t i1 = std::min(t, i0 + kBlock);
        gemm(false, true, i1 - i0, i1, d, scale, q + i0 * row, row, k, row, 0.0f, p + i0 * t, t);
      }
      for (int64_t i = 0; i < t; ++i) {
        float* pr = p + i * t;
        float mx = pr[0];
        for (int64_t j = 1; j <= i; ++j) mx = pr[j] > mx ? pr[j] : mx;
        for (int64_t j = 0; j <= i; ++j) pr[j] = fast_exp(pr[j] - mx);  // vectorized
        float sum = 0.0f;
        for (int64_t j = 0; j <= i; ++j) sum += pr[j];
        const float inv = 1.0f / sum;
        for (int64_t j = 0; j <= i; ++j) pr[j] *= inv;
        for (int64_t j = i + 1; j < t; ++j) pr[j] = 0.0f;
      }
      float* o = out + bi * t * hd + hi * d;
      for (int64_t i0 = 0; i0 < t; i0 += kBlock) {
        const int64_t i1 = std::min(t, i0 + kBlock);
        gemm(false, false, i1 - i0, d, i1, 1.0f, p + i0 * t, t, v, row, 0.0f, o + i0 * hd, hd);
      }
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
      // dP = dO V^T (lower triangle by blocks).
      for (int64_t i0 = 0; i0 < t; i0 += kBlock) {
        const int64_t i1 = std::min(t, i0 + kBlock);
        gemm(false, true, i1 - i0, i1, d, 1.0f, dout_bh + i0 * hd, hd, v, row, 0.0f,
             ds.data() + i0 * t, t);
      }
      // Softmax backward: dS = P * (dP - sum_j P dP), zero above the diagonal.
      for (int64_t i = 0; i < t; ++i) {
        const float* pr = p + i * t;
        float* dr = ds.data() + i * t;
        float dot = 0.0f;
        for (int64_t j = 0; j <= i; ++j) dot += pr[j] * dr[j];
        for (int64_t j = 0; j <= i; ++j) dr[j] = pr[j] * (dr[j] - dot);
        for (int64_t j = i + 1; j < t; ++j) dr[j] = 0.0f;
      }
      for (int64_t i = 0; i < t; ++i) {
        std::fill(dk + i * row, dk + i * row + d, 0.0f);
        std::fill(dv + i * row, dv + i * row + d, 0.0f);
      }
      for (int64_t i0 = 0; i0 < t; i0 += kBlock) {
        const int64_t i1 = std::min(t, i0 + kBlock);
        const int64_t rows = i1 - i0;
        // dV[0:i1] += P[i0:i1, 0:i1]^T dO[i0:i1]
        gemm(true, false, i1, d, rows, 1.0f, p + i0 * t, t, dout_bh + i0 * hd, hd, 1.0f, dv, row);
        // dQ[i0:i1] = scale * dS[i0:i1, 0:i1] K[0:i1]
        gemm(false, false, rows, d, i1, scale, ds.data() + i0 * t, t, k, row, 0.0f, dq + i0 * row,
             row);
        // dK[0:i1] += scale * dS[i0:i1, 0:i1]^T Q[i0:i1]
        gemm(true, false, i1, d, rows, scale, ds.data() + i0 * t, t, q + i0 * row, row, 1.0f, dk,
             row);
      }
    }
  }
}

}  // namespace ntp::kernels::cpu
