#include "kernels/cpu/matmul.h"

#include "kernels/cpu/gemm.h"
#include "kernels/cpu/gemm_bf16.h"

namespace ntp::kernels::cpu {

const char* matmul_dtype_name(MatmulDtype dtype) { return name_of(kMatmulDtypeNames, dtype); }

void matmul(MatmulDtype dtype, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k,
            float alpha, const float* a, int64_t lda, const float* b, int64_t ldb, float beta,
            float* c, int64_t ldc) {
  if (dtype == MatmulDtype::kBf16) {
    gemm_bf16(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
  } else {
    gemm(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
  }
}

}  // namespace ntp::kernels::cpu
