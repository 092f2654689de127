#include "kernels/cpu/gemm_backend.h"

// OpenBLAS's cblas.h first: blis.h would otherwise pull in BLIS's own cblas.h under the same
// include guard, without OpenBLAS's blasint.
#include <cblas.h>
// clang-format off
#include <blis.h>
// clang-format on
#include <oneapi/dnnl/dnnl.h>

#include <climits>
#include <mutex>

#include "core/check.h"
#include "core/named_values.h"
#include "kernels/cpu/blas_select.h"

// libgomp's, for oneDNN's OpenMP runtime (omp.h needs -fopenmp, which nothing else here wants).
extern "C" void omp_set_num_threads(int threads);

namespace ntp::kernels::cpu {
namespace {

constexpr NamedValue<GemmBackend> kGemmBackendNames[] = {{GemmBackend::kOpenBlas, "openblas"},
                                                         {GemmBackend::kBlis, "blis"},
                                                         {GemmBackend::kOneDnn, "onednn"}};

blasint to_blas(int64_t v) {
  NTP_CHECK_MSG(v >= 0 && v <= INT_MAX, "matrix dimension does not fit a BLAS int");
  return static_cast<blasint>(v);
}

void openblas_sgemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                    const float* a, int64_t lda, const float* b, int64_t ldb, float beta, float* c,
                    int64_t ldc) {
  cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans,
              trans_b ? CblasTrans : CblasNoTrans, to_blas(m), to_blas(n), to_blas(k), alpha, a,
              to_blas(lda), b, to_blas(ldb), beta, c, to_blas(ldc));
}

// BLIS takes any row and column strides: a row-major [r, c] block with leading dimension ld has
// row stride ld and column stride 1, and op() is a flag, so no layout conversion happens here.
void blis_sgemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                const float* a, int64_t lda, const float* b, int64_t ldb, float beta, float* c,
                int64_t ldc) {
  static std::once_flag once;
  std::call_once(once, [] { bli_thread_set_num_threads(1); });
  // BLIS's typed API takes non-const pointers; it reads A, B, alpha and beta only.
  bli_sgemm(trans_a ? BLIS_TRANSPOSE : BLIS_NO_TRANSPOSE,
            trans_b ? BLIS_TRANSPOSE : BLIS_NO_TRANSPOSE, m, n, k, &alpha, const_cast<float*>(a),
            lda, 1, const_cast<float*>(b), ldb, 1, &beta, c, ldc, 1);
}

}  // namespace

void onednn_on_this_thread_only() { omp_set_num_threads(1); }

namespace {

void onednn_sgemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                  const float* a, int64_t lda, const float* b, int64_t ldb, float beta, float* c,
                  int64_t ldc) {
  onednn_on_this_thread_only();
  const dnnl_status_t s = dnnl_sgemm(trans_a ? 'T' : 'N', trans_b ? 'T' : 'N', m, n, k, alpha, a,
                                     lda, b, ldb, beta, c, ldc);
  NTP_CHECK_MSG(s == dnnl_success, "dnnl_sgemm failed");
}

const char* onednn_isa_name(dnnl_cpu_isa_t isa) {
  static constexpr NamedValue<dnnl_cpu_isa_t> kNames[] = {
      {dnnl_cpu_isa_avx512_core_amx, "avx512_core_amx"},
      {dnnl_cpu_isa_avx512_core_bf16, "avx512_core_bf16"},
      {dnnl_cpu_isa_avx512_core, "avx512_core"},
      {dnnl_cpu_isa_avx2, "avx2"},
      {dnnl_cpu_isa_avx, "avx"}};
  return name_of(kNames, isa, "other");
}

}  // namespace

const char* gemm_backend_name(GemmBackend backend) { return name_of(kGemmBackendNames, backend); }

std::optional<GemmBackend> parse_gemm_backend(std::string_view name) {
  return value_named(kGemmBackendNames, name);
}

std::string gemm_backend_library(GemmBackend backend) {
  switch (backend) {
    case GemmBackend::kBlis: {
      const arch_t arch = bli_arch_query_id();
      return std::string("BLIS ") + bli_info_get_version_str() + " " + bli_arch_string(arch);
    }
    case GemmBackend::kOneDnn: {
      const dnnl_version_t* v = dnnl_version();
      return "oneDNN " + std::to_string(v->major) + "." + std::to_string(v->minor) + "." +
             std::to_string(v->patch) + " " + onednn_isa_name(dnnl_get_effective_cpu_isa());
    }
    case GemmBackend::kOpenBlas:
      break;
  }
  return "OpenBLAS " + openblas_core();
}

bool gemm_backend_splits_by_rows(GemmBackend backend) { return backend == GemmBackend::kOpenBlas; }

void backend_sgemm(GemmBackend backend, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k,
                   float alpha, const float* a, int64_t lda, const float* b, int64_t ldb,
                   float beta, float* c, int64_t ldc) {
  switch (backend) {
    case GemmBackend::kBlis:
      blis_sgemm(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
      return;
    case GemmBackend::kOneDnn:
      onednn_sgemm(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
      return;
    case GemmBackend::kOpenBlas:
      break;
  }
  openblas_sgemm(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

}  // namespace ntp::kernels::cpu
