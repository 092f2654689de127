#include "kernels/cpu/gemm_bf16.h"

#include <immintrin.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <vector>

#include "core/check.h"
#include "core/named_values.h"
#include "kernels/cpu/bf16.h"
#include "kernels/cpu/gemm.h"
#include "kernels/cpu/gemm_backend_select.h"
#include "kernels/cpu/gemm_bf16_onednn.h"
#include "kernels/cpu/isa.h"
#include "kernels/cpu/parallel.h"

namespace ntp::kernels::cpu {
namespace {

// A tile of C is kMr rows x kNr columns: kNr = two 16-lane float32 registers, kMr x 2 = 16
// accumulators, which leaves the other 16 ZMM registers for B's two vectors and A's broadcast.
constexpr int64_t kMr = 8;
constexpr int64_t kNr = 32;

// Packed operands hold bf16 pairs along k in one uint32: bits 0-15 element 2p, bits 16-31 element
// 2p + 1 (vdpbf16ps's pairing). Rows past m, columns past n and the odd k's missing partner are 0.
//   A: [row block][pair p][kMr rows]     B: [column panel][pair p][kNr columns]
uint32_t pair_of(float even, float odd) {
  return static_cast<uint32_t>(float_to_bf16(even)) |
         (static_cast<uint32_t>(float_to_bf16(odd)) << 16);
}

struct Packed {
  std::vector<uint32_t> a, b;
  int64_t pairs = 0, row_blocks = 0, col_panels = 0;
};

void pack(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, const float* a, int64_t lda,
          const float* b, int64_t ldb, Packed& p) {
  p.pairs = (k + 1) / 2;
  p.row_blocks = (m + kMr - 1) / kMr;
  p.col_panels = (n + kNr - 1) / kNr;
  auto a_at = [&](int64_t i, int64_t kk) {
    return i < m && kk < k ? (trans_a ? a[kk * lda + i] : a[i * lda + kk]) : 0.0f;
  };
  auto b_at = [&](int64_t kk, int64_t j) {
    return kk < k && j < n ? (trans_b ? b[j * ldb + kk] : b[kk * ldb + j]) : 0.0f;
  };
  p.a.assign(static_cast<size_t>(p.row_blocks * p.pairs * kMr), 0u);
  p.b.assign(static_cast<size_t>(p.col_panels * p.pairs * kNr), 0u);
  for (int64_t ib = 0; ib < p.row_blocks; ++ib) {
    uint32_t* dst = p.a.data() + ib * p.pairs * kMr;
    for (int64_t q = 0; q < p.pairs; ++q) {
      for (int64_t r = 0; r < kMr; ++r) {
        const int64_t i = ib * kMr + r;
        dst[q * kMr + r] = pair_of(a_at(i, 2 * q), a_at(i, 2 * q + 1));
      }
    }
  }
  for (int64_t jb = 0; jb < p.col_panels; ++jb) {
    uint32_t* dst = p.b.data() + jb * p.pairs * kNr;
    for (int64_t q = 0; q < p.pairs; ++q) {
      for (int64_t j = 0; j < kNr; ++j) {
        const int64_t col = jb * kNr + j;
        dst[q * kNr + j] = pair_of(b_at(2 * q, col), b_at(2 * q + 1, col));
      }
    }
  }
}

// One tile, acc[kMr][kNr] from 0: the per-element definition of gemm_bf16.h's kAvx512Bf16.
float daz(uint16_t h) {
  const float x = bf16_to_float(h);
  return std::fpclassify(x) == FP_SUBNORMAL ? std::copysign(0.0f, x) : x;
}
float ftz(float x) { return std::fpclassify(x) == FP_SUBNORMAL ? std::copysign(0.0f, x) : x; }

void tile_emulated(const uint32_t* a, const uint32_t* b, int64_t pairs, float* acc) {
  for (int64_t r = 0; r < kMr; ++r) {
    for (int64_t j = 0; j < kNr; ++j) {
      float s = 0.0f;
      for (int64_t q = 0; q < pairs; ++q) {
        const uint32_t x = a[q * kMr + r], y = b[q * kNr + j];
        s = ftz(
            std::fma(daz(static_cast<uint16_t>(x >> 16)), daz(static_cast<uint16_t>(y >> 16)), s));
        s = ftz(std::fma(daz(static_cast<uint16_t>(x)), daz(static_cast<uint16_t>(y)), s));
      }
      acc[r * kNr + j] = s;
    }
  }
}

__attribute__((target("avx512f,avx512bf16"))) void tile_avx512_bf16(const uint32_t* a,
                                                                    const uint32_t* b,
                                                                    int64_t pairs, float* acc) {
  __m512 lo[kMr], hi[kMr];
  for (int64_t r = 0; r < kMr; ++r) lo[r] = hi[r] = _mm512_setzero_ps();
  // The bf16 vector types are loaded by memcpy (no vector cast between integer and bf16 lanes
  // is allowed without a warning; the copies compile to plain loads and broadcasts).
  for (int64_t q = 0; q < pairs; ++q) {
    __m512bh b0, b1;
    std::memcpy(&b0, b + q * kNr, sizeof b0);
    std::memcpy(&b1, b + q * kNr + 16, sizeof b1);
    for (int64_t r = 0; r < kMr; ++r) {
      const __m512i xi = _mm512_set1_epi32(static_cast<int>(a[q * kMr + r]));
      __m512bh x;
      std::memcpy(&x, &xi, sizeof x);
      lo[r] = _mm512_dpbf16_ps(lo[r], x, b0);
      hi[r] = _mm512_dpbf16_ps(hi[r], x, b1);
    }
  }
  for (int64_t r = 0; r < kMr; ++r) {
    _mm512_storeu_ps(acc + r * kNr, lo[r]);
    _mm512_storeu_ps(acc + r * kNr + 16, hi[r]);
  }
}

void gemm_packed(bool native, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k,
                 float alpha, const float* a, int64_t lda, const float* b, int64_t ldb, float beta,
                 float* c, int64_t ldc) {
  // Per calling thread (attention calls from several parallel_for ranges at once). The worker
  // threads below must read the caller's buffers, so they see them through this reference (a
  // thread_local named inside the lambda would be each worker's own).
  thread_local Packed buffers;
  Packed& p = buffers;
  pack(trans_a, trans_b, m, n, k, a, lda, b, ldb, p);
  const int64_t tiles = p.row_blocks * p.col_panels;
  // Column panel outer (its B stays in cache over the row blocks); each C element is computed
  // by one tile in one order, so the bits do not depend on the split.
  parallel_for(tiles, 1, [&](int64_t t0, int64_t t1) {
    alignas(64) float acc[kMr * kNr];
    for (int64_t t = t0; t < t1; ++t) {
      const int64_t jb = t / p.row_blocks, ib = t % p.row_blocks;
      const uint32_t* pa = p.a.data() + ib * p.pairs * kMr;
      const uint32_t* pb = p.b.data() + jb * p.pairs * kNr;
      if (native) {
        tile_avx512_bf16(pa, pb, p.pairs, acc);
      } else {
        tile_emulated(pa, pb, p.pairs, acc);
      }
      const int64_t rows = std::min(kMr, m - ib * kMr), cols = std::min(kNr, n - jb * kNr);
      for (int64_t r = 0; r < rows; ++r) {
        float* crow = c + (ib * kMr + r) * ldc + jb * kNr;
        for (int64_t j = 0; j < cols; ++j) {
          const float prod = alpha * acc[r * kNr + j];
          crow[j] = beta == 0.0f ? prod : prod + beta * crow[j];
        }
      }
    }
  });
}

void gemm_rounded_sgemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                        const float* a, int64_t lda, const float* b, int64_t ldb, float beta,
                        float* c, int64_t ldc) {
  // op(A) and op(B) rounded in their stored orientation into dense buffers (per calling thread:
  // attention calls this from several parallel_for ranges at once).
  thread_local std::vector<float> ra, rb;
  const int64_t a_rows = trans_a ? k : m, a_cols = trans_a ? m : k;
  const int64_t b_rows = trans_b ? n : k, b_cols = trans_b ? k : n;
  ra.resize(static_cast<size_t>(a_rows * a_cols));
  rb.resize(static_cast<size_t>(b_rows * b_cols));
  round_block_to_bf16(a, a_rows, a_cols, lda, ra.data(), a_cols);
  round_block_to_bf16(b, b_rows, b_cols, ldb, rb.data(), b_cols);
  gemm(trans_a, trans_b, m, n, k, alpha, ra.data(), a_cols, rb.data(), b_cols, beta, c, ldc);
}

}  // namespace

const char* bf16_gemm_path_name(Bf16GemmPath path) {
  static constexpr NamedValue<Bf16GemmPath> kNames[] = {
      {Bf16GemmPath::kAvx512Bf16, "avx512_bf16"},
      {Bf16GemmPath::kEmulated, "emulated"},
      {Bf16GemmPath::kRoundedSgemm, "rounded-sgemm"},
      {Bf16GemmPath::kOneDnnMatmul, "onednn-matmul"}};
  return name_of(kNames, path);
}

bool host_has_avx512_bf16() { return host_cpu_features().avx512_bf16; }

Bf16GemmPath default_bf16_gemm_path() {
  return host_has_avx512_bf16() && active_isa() == Isa::kAvx512 ? measured_bf16_gemm_path()
                                                                : Bf16GemmPath::kRoundedSgemm;
}

void gemm_bf16(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
               const float* a, int64_t lda, const float* b, int64_t ldb, float beta, float* c,
               int64_t ldc) {
  gemm_bf16_path(default_bf16_gemm_path(), trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta,
                 c, ldc);
}

void gemm_bf16_path(Bf16GemmPath path, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k,
                    float alpha, const float* a, int64_t lda, const float* b, int64_t ldb,
                    float beta, float* c, int64_t ldc) {
  if (m == 0 || n == 0) return;
  if (k == 0 || path == Bf16GemmPath::kRoundedSgemm) {  // gemm's k = 0 semantics too
    gemm_rounded_sgemm(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
    return;
  }
  NTP_CHECK_MSG(path == Bf16GemmPath::kEmulated || host_has_avx512_bf16(),
                "the avx512_bf16 and onednn-matmul paths need a host with avx512_bf16");
  if (path == Bf16GemmPath::kOneDnnMatmul) {
    onednn_bf16_gemm(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
    return;
  }
  gemm_packed(path == Bf16GemmPath::kAvx512Bf16, trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb,
              beta, c, ldc);
}

}  // namespace ntp::kernels::cpu
