// Causal multi-head self-attention core (no projections), GPT-2 semantics, in fused query blocks
// (flash-attention style: no [T, T] probability matrix is kept; backward recomputes it per block).
//
// qkv[B, T, 3*H*D] is the fused output of c_attn for H heads of size D: per token row, the Q block
// (H*D values, head h at offset h*D), then the K block, then the V block. This is Hugging Face's
// c_attn column order restricted to the heads a rank holds, so a tensor-parallel shard calls the
// same kernel with its local H.
//   S = Q K^T / sqrt(D), masked to j <= i, P = softmax_row(S), out = P V
// out[B, T, H*D]: head h at offset h*D of each row (the row order c_proj.weight expects).
// lse[B, H, T] is saved for backward: lse[i] = log sum_{j <= i} exp(S[i, j]), so that
// P[i, j] = exp(S[i, j] - lse[i]).
// Backward, given dout: dqkv[B, T, 3*H*D] is overwritten.
//
// Queries go in blocks of 64 rows; a block's scores against its keys [0, i1) live in a per-thread
// scratch of 64 x T floats (128 KiB at T = 512), and the products are sgemm calls on strided
// views of qkv (no copies). The masked triangle past each block is skipped.
// `dtype` is the products' input precision (matmul.h): under kBf16 the five products (S = Q K^T,
// P V, and backward's dP = dO V^T, P^T dO, dS K, dS^T Q) read Q, K, V, P, dO and dS rounded to
// bf16; softmax, lse and every output stay float32.
#pragma once

#include <cstdint>

#include "kernels/cpu/matmul.h"

namespace ntp::kernels::cpu {

void attention_forward(const float* qkv, int64_t b, int64_t t, int64_t h, int64_t d, float* out,
                       float* lse, MatmulDtype dtype = MatmulDtype::kFp32);

void attention_backward(const float* qkv, const float* lse, const float* dout, int64_t b, int64_t t,
                        int64_t h, int64_t d, float* dqkv, MatmulDtype dtype = MatmulDtype::kFp32);

}  // namespace ntp::kernels::cpu
