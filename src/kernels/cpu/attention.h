// Causal multi-head self-attention core (no projections), GPT-2 semantics.
//
// qkv[B, T, 3*H*D] is the fused output of c_attn for H heads of size D: per token row, the Q block
// (H*D values, head h at offset h*D), then the K block, then the V block. This is Hugging Face's
// c_attn column order restricted to the heads a rank holds, so a tensor-parallel shard calls the
// same kernel with its local H.
//   S = Q K^T / sqrt(D), masked to j <= i, P = softmax_row(S), out = P V
// out[B, T, H*D]: head h at offset h*D of each row (the row order c_proj.weight expects).
// probs[B, H, T, T] is saved for backward; entries with j > i are exactly 0.
// Backward, given dout: dqkv[B, T, 3*H*D] is overwritten.
// Per (batch, head) the products go through sgemm with strided leading dimensions, no copies.
#pragma once

#include <cstdint>

namespace ntp::kernels::cpu {

void attention_forward(const float* qkv, int64_t b, int64_t t, int64_t h, int64_t d, float* out,
                       float* probs);

void attention_backward(const float* qkv, const float* probs, const float* dout, int64_t b,
                        int64_t t, int64_t h, int64_t d, float* dqkv);

}  // namespace ntp::kernels::cpu
