// Row-major single-precision matrix product through the host's GEMM library (OpenBLAS, BLIS or
// oneDNN: gemm_backend.h, chosen per host by gemm_backend_select.h):
//   C[M,N] = alpha * op(A) * op(B) + beta * C
// op(A) is [M,K] (A stored [M,K] with leading dimension lda, or [K,M] when trans_a).
// op(B) is [K,N] (B stored [K,N] with leading dimension ldb, or [N,K] when trans_b).
// Leading dimensions are in elements and let callers address strided column blocks (for example
// one attention head inside a fused QKV row) without copying.
//
// Threads: with OpenBLAS (gemm_backend_splits_by_rows), a product of 2^22 multiply-adds or more
// is split over kernel_threads() (parallel.h) by
// rows of C, each part a single-threaded library call, with the same bits as one call; smaller
// products, and calls from inside a parallel_for range, are one library call (OpenBLAS's on its
// own threads; BLIS and oneDNN always on the calling thread).
#pragma once

#include <cstdint>

namespace ntp::kernels::cpu {

void gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
          int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc);

// Benchmarks: called with every gemm product's shape before it is computed (gemm_bf16's too,
// which computes through gemm on hosts without avx512_bf16); nullptr (the default) for none. Not
// thread-safe against running products: set it while no product runs.
using GemmObserver = void (*)(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k);
void set_gemm_observer(GemmObserver observer);

// Sets the number of OpenBLAS threads (>= 1), and kernel_threads() with it, and returns the value
// in effect afterwards.
int set_blas_threads(int threads);
// OpenBLAS's current thread count (1 inside SingleThreadedBlas, parallel.h).
int blas_threads();

}  // namespace ntp::kernels::cpu
