// Global-norm gradient clipping (torch.nn.utils.clip_grad_norm_ semantics).
// The global norm is sqrt of the sum of squares of every gradient element of the model; under
// tensor parallelism each rank contributes the squares of its shards plus (once per replica) the
// replicated tensors, and the caller all-reduces the sum before taking the root.
#pragma once

#include <cstdint>

namespace ntp::kernels::cpu {

// Sum of x[i]^2 over n values, accumulated in double (16 interleaved partial sums per chunk of
// 64 Ki values, chunks added in order, so the result is the same in every ISA variant and at any
// thread count).
double sum_of_squares(const float* x, int64_t n);
// Multiplier that brings a gradient of norm `global_norm` to at most `max_norm`:
// min(1, max_norm / (global_norm + 1e-6)). max_norm > 0.
float clip_coefficient(double global_norm, double max_norm);
void scale_in_place(float* x, int64_t n, float factor);

}  // namespace ntp::kernels::cpu
