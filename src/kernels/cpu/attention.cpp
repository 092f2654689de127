#include "kernels/cpu/attention.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "kernels/cpu/fast_exp.h"
#include "kernels/cpu/isa_dispatch.h"
#include "kernels/cpu/lane_sum.h"
#include "kernels/cpu/parallel.h"

namespace ntp::kernels::cpu {
namespace {

constexpr int64_t kBlock = 64;

// Per-thread scratch of at least n floats.
float* scratch(std::vector<float>& buf, int64_t n) {
  if (static_cast<int64_t>(buf.size()) < n) buf.resize(static_cast<size_t>(n));
  return buf.data();
}

// Row softmax of a block of scores s[rows, ld] in place (row r is query i0 + r, keys j <= i0 + r),
// zeroing the masked keys up to `cols`; writes each row's logsumexp.
NTP_ISA_INLINE void softmax_rows_body(float* s, int64_t rows, int64_t cols, int64_t ld, int64_t i0,
                                      float* lse) {
  for (int64_t r = 0; r < rows; ++r) {
    float* pr = s + r * ld;
    const int64_t n = i0 + r + 1;
    const float mx = lane_max(pr, n);
    // exp and its sum in one pass (the same sum, bit for bit, as summing the stored values).
    const float sum = lane_sum<float>(n, [pr, mx](int64_t j) {
      const float e = fast_exp(pr[j] - mx);
      pr[j] = e;
      return e;
    });
    const float inv = 1.0f / sum;
    for (int64_t j = 0; j < n; ++j) pr[j] *= inv;
    for (int64_t j = n; j < cols; ++j) pr[j] = 0.0f;
    lse[r] = mx + std::log(sum);
  }
}
NTP_ISA_VARIANTS(softmax_rows, softmax_rows_body)

// From recomputed scores s and dP = dO V^T (both [rows, ld]): s becomes P = exp(s - lse) and dp
// becomes dS = P * (dP - sum_j P dP), both zero past the diagonal up to `cols`.
NTP_ISA_INLINE void softmax_backward_rows_body(float* s, float* dp, int64_t rows, int64_t cols,
                                               int64_t ld, int64_t i0, const float* lse) {
  for (int64_t r = 0; r < rows; ++r) {
    float* pr = s + r * ld;
    float* dr = dp + r * ld;
    const int64_t n = i0 + r + 1;
    const float l = lse[r];
    const float dot = lane_sum<float>(n, [pr, dr, l](int64_t j) {
      const float p = fast_exp(pr[j] - l);
      pr[j] = p;
      return p * dr[j];
    });
    for (int64_t j = 0; j < n; ++j) dr[j] = pr[j] * (dr[j] - dot);
    for (int64_t j = n; j < cols; ++j) pr[j] = dr[j] = 0.0f;
  }
}
NTP_ISA_VARIANTS(softmax_backward_rows, softmax_backward_rows_body)

// Where one (batch, head) pair's slices lie, pair = batch * h + head: a qkv-shaped tensor's rows
// (qkv, dqkv) hold [q | k | v] of h heads each (`row` = 3 h d floats), an out-shaped tensor's rows
// (out, dout) the h heads (`hd` = h d floats), lse t floats per pair.
struct HeadLayout {
  HeadLayout(int64_t tokens, int64_t heads, int64_t head_dim)
      : t(tokens),
        h(heads),
        d(head_dim),
        hd(heads * head_dim),
        row(3 * hd),
        scale(1.0f / std::sqrt(static_cast<float>(head_dim))) {}
  // The offsets of the pair's first q column (qkv-shaped), first column (out-shaped), first lse.
  int64_t qkv_at(int64_t pair) const { return pair / h * t * row + pair % h * d; }
  int64_t out_at(int64_t pair) const { return pair / h * t * hd + pair % h * d; }
  int64_t lse_at(int64_t pair) const { return pair * t; }

  int64_t t, h, d, hd, row;
  float scale;  // of the scores: 1 / sqrt(d)
};

// Calls head(pair, scratch) for each of `pairs` (batch, head) pairs. The pairs are independent:
// they are split over the kernel threads, each with `scratch_floats` of its own scratch and
// single-threaded sgemm calls (these products are too small to split further).
template <class Head>
void for_each_head(int64_t pairs, int64_t scratch_floats, Head&& head) {
  const SingleThreadedBlas single;
  parallel_for(pairs, 1, [&](int64_t pair0, int64_t pair1) {
    thread_local std::vector<float> buf;
    float* s = scratch(buf, scratch_floats);
    for (int64_t pair = pair0; pair < pair1; ++pair) head(pair, s);
  });
}

}  // namespace

void attention_forward(const float* qkv, int64_t b, int64_t t, int64_t h, int64_t d, float* out,
                       float* lse, MatmulDtype dtype) {
  const HeadLayout g(t, h, d);
  for_each_head(b * h, kBlock * t, [&](int64_t pair, float* s) {
    const float* q = qkv + g.qkv_at(pair);
    const float* k = q + g.hd;
    const float* v = q + 2 * g.hd;
    float* o = out + g.out_at(pair);
    float* l = lse + g.lse_at(pair);
    for (int64_t i0 = 0; i0 < t; i0 += kBlock) {
      const int64_t i1 = std::min(t, i0 + kBlock);
      const int64_t rows = i1 - i0;
      matmul(dtype, false, true, rows, i1, d, g.scale, q + i0 * g.row, g.row, k, g.row, 0.0f, s,
             i1);
      softmax_rows(s, rows, i1, i1, i0, l + i0);
      matmul(dtype, false, false, rows, d, i1, 1.0f, s, i1, v, g.row, 0.0f, o + i0 * g.hd, g.hd);
    }
  });
}

void attention_backward(const float* qkv, const float* lse, const float* dout, int64_t b, int64_t t,
                        int64_t h, int64_t d, float* dqkv, MatmulDtype dtype) {
  const HeadLayout g(t, h, d);
  const int64_t row = g.row, hd = g.hd;
  for_each_head(b * h, 2 * kBlock * t, [&](int64_t pair, float* s) {
    float* dp = s + kBlock * t;
    const float* q = qkv + g.qkv_at(pair);
    const float* k = q + hd;
    const float* v = q + 2 * hd;
    float* dq = dqkv + g.qkv_at(pair);
    float* dk = dq + hd;
    float* dv = dq + 2 * hd;
    const float* l = lse + g.lse_at(pair);
    const float* dout_bh = dout + g.out_at(pair);
    for (int64_t i = 0; i < t; ++i) {
      std::fill(dk + i * row, dk + i * row + d, 0.0f);
      std::fill(dv + i * row, dv + i * row + d, 0.0f);
    }
    for (int64_t i0 = 0; i0 < t; i0 += kBlock) {
      const int64_t i1 = std::min(t, i0 + kBlock);
      const int64_t rows = i1 - i0;
      const float* q_blk = q + i0 * row;
      const float* dout_blk = dout_bh + i0 * hd;
      matmul(dtype, false, true, rows, i1, d, g.scale, q_blk, row, k, row, 0.0f, s, i1);  // S
      matmul(dtype, false, true, rows, i1, d, 1.0f, dout_blk, hd, v, row, 0.0f, dp, i1);  // dP
      softmax_backward_rows(s, dp, rows, i1, i1, i0, l + i0);
      // dV[0:i1] += P^T dO;  dQ = scale dS K[0:i1];  dK[0:i1] += scale dS^T Q
      matmul(dtype, true, false, i1, d, rows, 1.0f, s, i1, dout_blk, hd, 1.0f, dv, row);
      matmul(dtype, false, false, rows, d, i1, g.scale, dp, i1, k, row, 0.0f, dq + i0 * row, row);
      matmul(dtype, true, false, i1, d, rows, g.scale, dp, i1, q_blk, row, 1.0f, dk, row);
    }
  });
}

}  // namespace ntp::kernels::cpu
