// The libraries that can compute gemm's single-threaded products (gemm.h): OpenBLAS (cblas_sgemm),
// BLIS (bli_sgemm, typed API) and oneDNN (dnnl_sgemm), all Debian packages. Each call here is one
// product on the calling thread: row-major, gemm.h's arguments and meaning, m, n, k > 0. ntp's
// gemm splits large products over its own threads and calls one of these per part; which one a
// process uses is chosen by gemm_backend_select.h.
//
// Threads: BLIS is set to one thread when first called and oneDNN's OpenMP team to one thread on
// every calling thread (omp_set_num_threads is per thread), so neither starts threads of its own
// beside ntp's; OpenBLAS keeps its thread count (blas_threads, gemm.h).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace ntp::kernels::cpu {

enum class GemmBackend { kOpenBlas, kBlis, kOneDnn };
inline constexpr GemmBackend kAllGemmBackends[] = {GemmBackend::kOpenBlas, GemmBackend::kBlis,
                                                   GemmBackend::kOneDnn};

// "openblas", "blis", "onednn".
const char* gemm_backend_name(GemmBackend backend);
// The backend of a name above, or nullopt.
std::optional<GemmBackend> parse_gemm_backend(std::string_view name);
// Library, version and kernel set, e.g. "BLIS 0.9.0 zen3" or "oneDNN 2.6.3 avx2".
std::string gemm_backend_library(GemmBackend backend);

// Whether a product cut into parts of whole multiples of 24 rows of C gives, part by part, the
// bits of one call (at one thread): what gemm's split over threads needs. True for OpenBLAS only
// (its tiles are 12 rows tall, gemm.cpp); BLIS 0.9 and oneDNN 2.6 give different last bits for
// the same rows in a shorter call (GemmBackendTest), so gemm runs their products unsplit, as one
// call on the calling thread.
bool gemm_backend_splits_by_rows(GemmBackend backend);

// oneDNN's OpenMP team at one thread on the calling thread (omp_set_num_threads is per thread):
// every oneDNN call of ntp's (sgemm here, gemm_bf16_onednn.h's matmul) runs on its caller alone.
void onednn_on_this_thread_only();

void backend_sgemm(GemmBackend backend, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k,
                   float alpha, const float* a, int64_t lda, const float* b, int64_t ldb,
                   float beta, float* c, int64_t ldc);

}  // namespace ntp::kernels::cpu
