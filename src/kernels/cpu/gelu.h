// GELU, tanh approximation (GPT-2's "gelu_new"), elementwise over n values:
//   y = 0.5 * x * (1 + tanh(s * (x + 0.044715 x^3))),  s = sqrt(2 / pi)
// Backward: dx = dy * dy/dx (overwritten).
#pragma once

#include <cstdint>

namespace ntp::kernels::cpu {

void gelu_forward(const float* x, int64_t n, float* y);
void gelu_backward(const float* x, const float* dy, int64_t n, float* dx);

}  // namespace ntp::kernels::cpu
