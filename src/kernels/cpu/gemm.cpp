#include "kernels/cpu/gemm.h"

#include <cblas.h>

#include <climits>

#include "core/check.h"

namespace ntp::kernels::cpu {
namespace {
blasint to_blas(int64_t v) {
  NTP_CHECK_MSG(v >= 0 && v <= INT_MAX, "matrix dimension does not fit a BLAS int");
  return static_cast<blasint>(v);
}
}  // namespace

void gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
          int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  if (m == 0 || n == 0) return;
  if (k == 0) {
    // BLAS leaves C untouched for k = 0 only when beta = 1; make beta semantics explicit.
    for (int64_t i = 0; i < m; ++i) {
      for (int64_t j = 0; j < n; ++j) c[i * ldc + j] = beta == 0.0f ? 0.0f : beta * c[i * ldc + j];
    }
    return;
  }
  cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans,
              trans_b ? CblasTrans : CblasNoTrans, to_blas(m), to_blas(n), to_blas(k), alpha, a,
              to_blas(lda), b, to_blas(ldb), beta, c, to_blas(ldc));
}

int set_blas_threads(int threads) {
  NTP_CHECK(threads >= 1);
  openblas_set_num_threads(threads);
  return openblas_get_num_threads();
}

int blas_threads() { return openblas_get_num_threads(); }

}  // namespace ntp::kernels::cpu
