// GELU, tanh approximation (GPT-2's "gelu_new"), elementwise over n values:
//   y = 0.5 * x * (1 + tanh(s * (x + 0.044715 x^3))),  s = sqrt(2 / pi)
// Backward: dx = dy * dy/dx (overwritten).
#pragma once

#include <cstdint>

namespace ntp::kernels::cpu {

void gelu_forward(const float* x, int64_t n, float* y);
void gelu_backward(const float* x, const float* dy, int64_t n, float* dx);
// gelu_backward over x, dy, dx[rows, cols] that also adds the column sums of dx to db[cols]: the
// bias gradient of the linear layer whose output x is (linear.h's add_column_sums, bit for bit),
// in the same pass instead of a second one over dx.
void gelu_backward_column_sums(const float* x, const float* dy, int64_t rows, int64_t cols,
                               float* dx, float* db);

}  // namespace ntp::kernels::cpu
