// Rotary position embedding (RoPE) in Hugging Face Llama's layout ("rotate_half"): within each
// head of even size D, element i pairs with element i + D/2 (not the interleaved pairs (2i, 2i+1)
// of the original paper), so weights exported to transformers' LlamaForCausalLM need no
// permutation.
//   inv_freq[i] = theta^(-2i / D),  angle[p, i] = p * inv_freq[i]   for i in [0, D/2)
//   y[i]       = x[i] cos(angle) - x[i + D/2] sin(angle)
//   y[i + D/2] = x[i + D/2] cos(angle) + x[i] sin(angle)
// (x * cos + rotate_half(x) * sin with rotate_half(x) = [-x2, x1]). Position p of token row r of a
// [B, T] batch is r % T.
// Tables cos, sin [T, D/2] are computed in double and rounded once (transformers computes them in
// float32; the difference is below float32 rounding of the result for p < 2^16).
// Backward is the inverse rotation (the transpose): dx[i] = dy[i] cos + dy[i + D/2] sin,
// dx[i + D/2] = dy[i + D/2] cos - dy[i] sin. Neither pass needs the input, so both work in place.
#pragma once

#include <cstdint>

namespace ntp::kernels::cpu {

// cos[T, D/2], sin[T, D/2] for positions [0, t); d even.
void rope_tables(int64_t t, int64_t d, double theta, float* cos, float* sin);

// In place on x: rows r in [0, b * t) at x + r * ld, each with h heads of d values at offset
// head * d (ld >= h * d lets a fused QKV row be addressed without copying).
void rope_forward(float* x, int64_t b, int64_t t, int64_t h, int64_t d, int64_t ld,
                  const float* cos, const float* sin);
// In place on the gradient dy (same addressing): dy <- d(loss)/d(x).
void rope_backward(float* dy, int64_t b, int64_t t, int64_t h, int64_t d, int64_t ld,
                   const float* cos, const float* sin);

}  // namespace ntp::kernels::cpu
