#include "kernels/cpu/gemm.h"

#include <cblas.h>

#include <algorithm>

#include "core/check.h"
#include "kernels/cpu/gemm_backend.h"
#include "kernels/cpu/gemm_backend_select.h"
#include "kernels/cpu/parallel.h"

namespace ntp::kernels::cpu {
namespace {
void blas_sgemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                const float* a, int64_t lda, const float* b, int64_t ldb, float beta, float* c,
                int64_t ldc) {
  backend_sgemm(gemm_backend(), trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

// Products of at least this many multiply-adds are split over the kernel threads; below it the
// hand-over costs more than a second core saves (2^22 is ~40 us of one core's sgemm).
constexpr int64_t kSplitMinMultiplyAdds = int64_t{1} << 22;
// Parts are cut at multiples of this many rows of C. OpenBLAS computes a row-major C in tiles
// 12 rows tall on its Haswell and Zen cores and at most 6 on its AVX-512, AVX and SSE cores (cuts
// measured on 0.3.21); cutting at a multiple of the tile height keeps each part's tiles those of
// the single call, so every element comes out of the same kernel code with the same k order: the
// same bits at any thread count (ParallelTest, on whichever core the host runs). 24 also covers
// 8-row tiles. Cutting by columns would not work: Haswell's tiles across columns depend on the
// width of the call.
constexpr int64_t kSplitRows = 24;

GemmObserver observer = nullptr;
}  // namespace

void set_gemm_observer(GemmObserver o) { observer = o; }

void gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
          int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  if (m == 0 || n == 0) return;
  if (observer != nullptr) observer(trans_a, trans_b, m, n, k);
  if (k == 0) {
    // BLAS leaves C untouched for k = 0 only when beta = 1; make beta semantics explicit.
    for (int64_t i = 0; i < m; ++i) {
      for (int64_t j = 0; j < n; ++j) c[i * ldc + j] = beta == 0.0f ? 0.0f : beta * c[i * ldc + j];
    }
    return;
  }
  if (kernel_threads() < 2 || m * n * k < kSplitMinMultiplyAdds || inside_parallel_range() ||
      !gemm_backend_splits_by_rows(gemm_backend())) {
    blas_sgemm(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
    return;
  }
  // Split C by rows into one part per kernel thread, each a single-threaded OpenBLAS call, cut at
  // multiples of kSplitRows. OpenBLAS's own threads then stay idle: the step's products and ntp's
  // kernels share one pool of threads instead of handing the cores back and forth between two.
  const SingleThreadedBlas single;
  parallel_for((m + kSplitRows - 1) / kSplitRows, 1, [&](int64_t b0, int64_t b1) {
    const int64_t r0 = b0 * kSplitRows, r1 = std::min(m, b1 * kSplitRows);
    const float* a_rows = trans_a ? a + r0 : a + r0 * lda;
    blas_sgemm(trans_a, trans_b, r1 - r0, n, k, alpha, a_rows, lda, b, ldb, beta, c + r0 * ldc,
               ldc);
  });
}

int set_blas_threads(int threads) {
  NTP_CHECK(threads >= 1);
  openblas_set_num_threads(threads);
  const int now = openblas_get_num_threads();
  set_kernel_threads(now);
  return now;
}

int blas_threads() { return openblas_get_num_threads(); }

}  // namespace ntp::kernels::cpu
