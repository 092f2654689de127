// Matrix product with bf16 inputs and float32 accumulation, the signature of gemm (gemm.h):
//   C[M,N] = alpha * (bf16(op(A)) * bf16(op(B))) + beta * C
// A and B are float32 in memory; every element of op(A) and op(B) is rounded to bf16 (RNE,
// bf16.h) before it is multiplied, products of two bf16 values are exact in float32, and they
// are summed in float32. C, alpha and beta stay float32. This is what "bf16 matmul inputs" means
// for `ntp train --dtype bf16` (docs/model.md): the weights in memory (the optimizer's master
// copy) stay float32, only what a product reads is rounded.
//
// Paths (one definition, three ways to compute it):
//   kAvx512Bf16    vdpbf16ps on packed bf16 pairs (hosts with avx512_bf16, active ISA avx512):
//                  per C element, k in pairs (2p, 2p + 1), acc = fma(a[2p+1], b[2p+1], acc)
//                  then acc = fma(a[2p], b[2p], acc), starting from 0, as the instruction does;
//                  bf16 subnormal inputs read as 0 and subnormal sums flush to 0 (DAZ/FTZ)
//   kEmulated      the same packing, tiling and per-element operations in scalar C++: the
//                  definition of kAvx512Bf16's bits, so its arithmetic is tested on any host and
//                  the two agree bit for bit where the instruction exists (Bf16GemmTest)
//   kRoundedSgemm  the inputs rounded to bf16 values in float32 buffers, then OpenBLAS sgemm
//                  (gemm.h): the same products, summed in sgemm's order; where no bf16
//                  instruction exists this is the fast path
//   kOneDnnMatmul  the inputs rounded into bf16 buffers, then oneDNN's matmul primitive
//                  (gemm_bf16_onednn.h: AMX tiles where the CPU has them), float32 sums in its
//                  order, denormals flushed as the instructions do (hosts with avx512_bf16)
// The paths differ only in the order of the float32 sums, so each is within the float32
// accumulation bound of the exact product of the rounded inputs.
#pragma once

#include <cstdint>

namespace ntp::kernels::cpu {

enum class Bf16GemmPath { kAvx512Bf16, kEmulated, kRoundedSgemm, kOneDnnMatmul };

const char* bf16_gemm_path_name(Bf16GemmPath path);
// True when the host has avx512_bf16 and the OS saves the ZMM state (isa.h).
bool host_has_avx512_bf16();
// Where the host has avx512_bf16 and active_isa() is avx512, the path measured fastest on this
// host (measured_bf16_gemm_path, gemm_backend_select.h: the instruction unless another is 5%
// faster); else kRoundedSgemm.
Bf16GemmPath default_bf16_gemm_path();

void gemm_bf16(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
               const float* a, int64_t lda, const float* b, int64_t ldb, float beta, float* c,
               int64_t ldc);

// The same through a given path (tests, benchmarks); kAvx512Bf16 and kOneDnnMatmul need
// host_has_avx512_bf16().
void gemm_bf16_path(Bf16GemmPath path, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k,
                    float alpha, const float* a, int64_t lda, const float* b, int64_t ldb,
                    float beta, float* c, int64_t ldc);

}  // namespace ntp::kernels::cpu
