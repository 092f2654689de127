#include "kernels/cpu/linear.h"

#include <algorithm>

#include "kernels/cpu/isa_dispatch.h"
#include "kernels/cpu/parallel.h"

namespace ntp::kernels::cpu {
namespace {
NTP_ISA_INLINE void add_bias_body(const float* b, int64_t n, int64_t out, float* y) {
  for (int64_t i = 0; i < n; ++i) {
    float* row = y + i * out;
    for (int64_t j = 0; j < out; ++j) row[j] += b[j];
  }
}
NTP_ISA_VARIANTS(add_bias_isa, add_bias_body)

// Columns [0, out) of dy with leading dimension ld.
NTP_ISA_INLINE void add_column_sums_body(const float* dy, int64_t n, int64_t out, int64_t ld,
                                         float* db) {
  for (int64_t i = 0; i < n; ++i) {
    const float* row = dy + i * ld;
    for (int64_t j = 0; j < out; ++j) db[j] += row[j];
  }
}
NTP_ISA_VARIANTS(add_column_sums_isa, add_column_sums_body)

NTP_ISA_INLINE void add_bias_residual_body(const float* x, const float* y, const float* b,
                                           int64_t n, int64_t out, float* z) {
  for (int64_t i = 0; i < n; ++i) {
    const float* xr = x + i * out;
    const float* yr = y + i * out;
    float* zr = z + i * out;
    for (int64_t j = 0; j < out; ++j) zr[j] = xr[j] + (yr[j] + b[j]);
  }
}
NTP_ISA_VARIANTS(add_bias_residual_isa, add_bias_residual_body)

NTP_ISA_INLINE void add_bias_rows_body(const float* x, const float* b, int64_t n, int64_t out,
                                       float* z) {
  for (int64_t i = 0; i < n; ++i) {
    const float* xr = x + i * out;
    float* zr = z + i * out;
    for (int64_t j = 0; j < out; ++j) zr[j] = xr[j] + b[j];
  }
}
NTP_ISA_VARIANTS(add_bias_rows_isa, add_bias_rows_body)
}  // namespace

void add_bias(const float* b, int64_t n, int64_t out, float* y) { add_bias_isa(b, n, out, y); }

void add_bias_residual(const float* x, const float* y, const float* b, int64_t n, int64_t out,
                       float* z) {
  parallel_for(n, std::max<int64_t>(1, 16384 / std::max<int64_t>(1, out)),
               [=](int64_t r0, int64_t r1) {
                 const int64_t o = r0 * out;
                 add_bias_residual_isa(x + o, y + o, b, r1 - r0, out, z + o);
               });
}

void add_column_sums(const float* dy, int64_t n, int64_t out, float* db) {
  // Column ranges, each summed over all rows in row order: the same bits at any split.
  parallel_for(out, 64, [=](int64_t c0, int64_t c1) {
    add_column_sums_isa(dy + c0, n, c1 - c0, out, db + c0);
  });
}

void linear_forward(const float* x, const float* w, const float* b, int64_t n, int64_t in,
                    int64_t out, float* y, MatmulDtype dtype) {
  if (b == nullptr) {
    matmul(dtype, false, false, n, out, in, 1.0f, x, in, w, out, 0.0f, y, out);
    return;
  }
  // y = b broadcast, then y += x w: OpenBLAS clears C in a pass of its own when beta = 0, so
  // writing the bias in that pass's place saves the separate pass that added it afterwards.
  parallel_for(n, std::max<int64_t>(1, 16384 / std::max<int64_t>(1, out)),
               [=](int64_t r0, int64_t r1) {
                 for (int64_t i = r0; i < r1; ++i) std::copy(b, b + out, y + i * out);
               });
  matmul(dtype, false, false, n, out, in, 1.0f, x, in, w, out, 1.0f, y, out);
}

void linear_forward_residual(const float* x, const float* w, const float* b, const float* residual,
                             int64_t n, int64_t in, int64_t out, float* y, MatmulDtype dtype) {
  // y = residual + b, then y += x w by sgemm with beta = 1 (no clearing pass, no add pass).
  parallel_for(n, std::max<int64_t>(1, 16384 / std::max<int64_t>(1, out)),
               [=](int64_t r0, int64_t r1) {
                 const int64_t o = r0 * out;
                 add_bias_rows_isa(residual + o, b, r1 - r0, out, y + o);
               });
  matmul(dtype, false, false, n, out, in, 1.0f, x, in, w, out, 1.0f, y, out);
}

void linear_backward(const float* x, const float* w, const float* dy, int64_t n, int64_t in,
                     int64_t out, float* dx, float* dw, float* db, MatmulDtype dtype) {
  if (dx != nullptr) matmul(dtype, false, true, n, in, out, 1.0f, dy, out, w, out, 0.0f, dx, in);
  matmul(dtype, true, false, in, out, n, 1.0f, x, in, dy, out, 1.0f, dw, out);
  if (db != nullptr) add_column_sums(dy, n, out, db);
}

}  // namespace ntp::kernels::cpu
