// Linear layer in Hugging Face Conv1D layout (weight stored [in, out]):
//   y[N, out] = x[N, in] * w[in, out] + b[out]          (b may be null: no bias)
// (the bias is written first and the product added onto it by sgemm with beta = 1).
// Backward, given dy[N, out]:
//   dx[N, in]  = dy * w^T      (overwritten; skipped when dx is null)
//   dw[in, out] += x^T * dy    (accumulated: parameter gradients add up over micro-batches)
//   db[out]    += sum_n dy     (accumulated; skipped when db is null)
// In tensor parallelism the same call serves a column-parallel shard (out = local columns) and a
// row-parallel shard (in = local rows); the caller all-reduces the partial sums.
// `dtype` is the products' input precision (matmul.h): under kBf16 x, w and dy are read rounded to
// bf16 by every product here, and y, dx, dw and db stay float32 sums.
#pragma once

#include <cstdint>

#include "kernels/cpu/matmul.h"

namespace ntp::kernels::cpu {

void linear_forward(const float* x, const float* w, const float* b, int64_t n, int64_t in,
                    int64_t out, float* y, MatmulDtype dtype = MatmulDtype::kFp32);

// y[N, out] = residual[N, out] + b[out] + x * w: a row-parallel layer of a single rank (no
// all-reduce between the product and the residual add), y may alias residual. Rounds as
// (residual + b) + x w, where add_bias_residual after linear_forward rounds as residual + (x w +
// b).
void linear_forward_residual(const float* x, const float* w, const float* b, const float* residual,
                             int64_t n, int64_t in, int64_t out, float* y,
                             MatmulDtype dtype = MatmulDtype::kFp32);

void linear_backward(const float* x, const float* w, const float* dy, int64_t n, int64_t in,
                     int64_t out, float* dx, float* dw, float* db,
                     MatmulDtype dtype = MatmulDtype::kFp32);

// db[out] += sum over the n rows of dy[n, out].
void add_column_sums(const float* dy, int64_t n, int64_t out, float* db);
// y[n, out] += b[out] for every row.
void add_bias(const float* b, int64_t n, int64_t out, float* y);
// z[n, out] = x + (y + b[out]) in one pass: a row-parallel layer's all-reduced output y, its bias
// and the residual stream x (z may alias x).
void add_bias_residual(const float* x, const float* y, const float* b, int64_t n, int64_t out,
                       float* z);

}  // namespace ntp::kernels::cpu
