// The input precision of the model's matrix products, chosen per job (`ntp train --dtype`):
// kFp32 calls gemm (gemm.h, OpenBLAS sgemm: the default, unchanged bit for bit), kBf16 calls
// gemm_bf16 (gemm_bf16.h: inputs rounded to bf16, float32 accumulation). Everything else of a
// step (element-wise ops, reductions, gradients, the optimizer) is float32 under either.
#pragma once

#include <cstdint>

#include "core/named_values.h"

namespace ntp::kernels::cpu {

enum class MatmulDtype { kFp32, kBf16 };

// Their names, "fp32" and "bf16" (`ntp train --dtype` parses them).
inline constexpr NamedValue<MatmulDtype> kMatmulDtypeNames[] = {{MatmulDtype::kFp32, "fp32"},
                                                                {MatmulDtype::kBf16, "bf16"}};
const char* matmul_dtype_name(MatmulDtype dtype);

// gemm (kFp32) or gemm_bf16 (kBf16), same arguments.
void matmul(MatmulDtype dtype, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k,
            float alpha, const float* a, int64_t lda, const float* b, int64_t ldb, float beta,
            float* c, int64_t ldc);

// The three forms of a layer's products, weights stored [out, in] as nn.Linear's:
// c[m, n] = a[m, k] b[n, k]^T + beta c: the forward y = x W^T.
inline void matmul_nt(MatmulDtype dtype, int64_t m, int64_t n, int64_t k, const float* a,
                      int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  matmul(dtype, false, true, m, n, k, 1.0f, a, lda, b, ldb, beta, c, ldc);
}
// c[m, n] = a[m, k] b[k, n] + beta c: the input gradient dx = dy W.
inline void matmul_nn(MatmulDtype dtype, int64_t m, int64_t n, int64_t k, const float* a,
                      int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  matmul(dtype, false, false, m, n, k, 1.0f, a, lda, b, ldb, beta, c, ldc);
}
// c[m, n] = a[k, m]^T b[k, n] + beta c: the weight gradient dW = dy^T x.
inline void matmul_tn(MatmulDtype dtype, int64_t m, int64_t n, int64_t k, const float* a,
                      int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  matmul(dtype, true, false, m, n, k, 1.0f, a, lda, b, ldb, beta, c, ldc);
}

}  // namespace ntp::kernels::cpu
