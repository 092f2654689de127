#include "kernels/cpu/gelu.h"

#include <algorithm>

#include "kernels/cpu/fast_exp.h"
#include "kernels/cpu/isa_dispatch.h"
#include "kernels/cpu/parallel.h"

namespace ntp::kernels::cpu {
namespace {
constexpr float kSqrt2OverPi = 0.7978845608028654f;
constexpr float kCubic = 0.044715f;

// tanh(u) = 1 - 2 / (exp(2u) + 1) with the vectorizable fast_exp instead of glibc's tanhf
// (expm1f-based and scalar; GELU was ~13% of a training step). Saturates correctly (large exp
// gives 1, tiny exp gives -1); the absolute error stays ~1e-7, which is all GELU needs since it
// uses 1 + tanh.
[[gnu::always_inline]] inline float fast_tanh(float u) {
  return 1.0f - 2.0f / (fast_exp(2.0f * u) + 1.0f);
}

NTP_ISA_INLINE void gelu_forward_body(const float* x, int64_t n, float* y) {
  for (int64_t i = 0; i < n; ++i) {
    const float v = x[i];
    const float u = kSqrt2OverPi * (v + kCubic * v * v * v);
    y[i] = 0.5f * v * (1.0f + fast_tanh(u));
  }
}
NTP_ISA_VARIANTS(gelu_forward_isa, gelu_forward_body)

[[gnu::always_inline]] inline float gelu_derivative(float v) {
  const float u = kSqrt2OverPi * (v + kCubic * v * v * v);
  const float t = fast_tanh(u);
  const float du = kSqrt2OverPi * (1.0f + 3.0f * kCubic * v * v);
  return 0.5f * (1.0f + t) + 0.5f * v * (1.0f - t * t) * du;
}

NTP_ISA_INLINE void gelu_backward_body(const float* x, const float* dy, int64_t n, float* dx) {
  for (int64_t i = 0; i < n; ++i) dx[i] = dy[i] * gelu_derivative(x[i]);
}
NTP_ISA_VARIANTS(gelu_backward_isa, gelu_backward_body)

// Columns [0, cols) of row-major arrays with leading dimension ld, row by row, so that db sees
// the rows in the order add_column_sums (linear.h) adds them.
NTP_ISA_INLINE void gelu_backward_column_sums_body(const float* x, const float* dy, int64_t rows,
                                                   int64_t cols, int64_t ld, float* dx, float* db) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * ld;
    const float* dyr = dy + r * ld;
    float* dxr = dx + r * ld;
    for (int64_t j = 0; j < cols; ++j) {
      const float g = dyr[j] * gelu_derivative(xr[j]);
      dxr[j] = g;
      db[j] += g;
    }
  }
}
NTP_ISA_VARIANTS(gelu_backward_column_sums_isa, gelu_backward_column_sums_body)
}  // namespace

// Element ranges of this size (and column ranges of a sixteenth of it) keep a split worth its
// hand-off (~10 us) to another thread.
constexpr int64_t kGrain = 1 << 16;

void gelu_forward(const float* x, int64_t n, float* y) {
  parallel_for(n, kGrain,
               [=](int64_t i0, int64_t i1) { gelu_forward_isa(x + i0, i1 - i0, y + i0); });
}

void gelu_backward(const float* x, const float* dy, int64_t n, float* dx) {
  parallel_for(n, kGrain, [=](int64_t i0, int64_t i1) {
    gelu_backward_isa(x + i0, dy + i0, i1 - i0, dx + i0);
  });
}

void gelu_backward_column_sums(const float* x, const float* dy, int64_t rows, int64_t cols,
                               float* dx, float* db) {
  // Column ranges: each range sums its columns over all rows in row order, so db does not
  // depend on the split.
  const int64_t grain = std::max<int64_t>(16, kGrain / 16 / std::max<int64_t>(1, rows) * 16);
  parallel_for(cols, grain, [=](int64_t c0, int64_t c1) {
    gelu_backward_column_sums_isa(x + c0, dy + c0, rows, c1 - c0, cols, dx + c0, db + c0);
  });
}

}  // namespace ntp::kernels::cpu
