// SwiGLU, Llama's FFN activation, over a fused gate|up row:
//   gu[N, 2F]: per row the F gate values, then the F up values (the outputs of gate_proj and
//   up_proj for the F FFN columns a rank holds, side by side)
//   out[N, F] = silu(gate) * up,   silu(x) = x * sigmoid(x) = x / (1 + exp(-x))
// Backward, given dout[N, F]: dgu[N, 2F] overwritten with
//   dgate = dout * up * sigmoid(gate) * (1 + gate * (1 - sigmoid(gate))),  dup = dout * silu(gate)
// The exponential is fast_exp.h's (relative error < 3e-7; saturates for |x| > 87).
#pragma once

#include <cstdint>

namespace ntp::kernels::cpu {

void swiglu_forward(const float* gu, int64_t n, int64_t f, float* out);
void swiglu_backward(const float* gu, const float* dout, int64_t n, int64_t f, float* dgu);

}  // namespace ntp::kernels::cpu
