// gemm_bf16 (gemm_bf16.h) through oneDNN's matmul primitive: the inputs rounded to bf16 (RNE,
// bf16.h) into bf16 buffers, multiplied by the primitive oneDNN picks for this CPU (AMX tiles on
// Sapphire Rapids and later, its avx512_bf16 kernels before), products exact and summed in
// float32, alpha and beta applied to the float32 C. Bf16GemmPath::kOneDnnMatmul.
//
// Primitives are created once per shape, transposition, leading dimensions, alpha and beta on
// each calling thread (a step has a few dozen), and run with oneDNN's OpenMP team at one thread,
// as the backends' sgemm does (gemm_backend.h). Denormal inputs and sums follow the hardware's
// bf16 instructions (flushed to zero), as kAvx512Bf16's do.
#pragma once

#include <cstdint>

namespace ntp::kernels::cpu {

void onednn_bf16_gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                      const float* a, int64_t lda, const float* b, int64_t ldb, float beta,
                      float* c, int64_t ldc);

}  // namespace ntp::kernels::cpu
