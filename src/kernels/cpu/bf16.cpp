#include "kernels/cpu/bf16.h"

#include <algorithm>

#include "kernels/cpu/isa_dispatch.h"
#include "kernels/cpu/parallel.h"

namespace ntp::kernels::cpu {
namespace {
NTP_ISA_INLINE void round_rows_body(const float* src, int64_t rows, int64_t cols, int64_t ld_src,
                                    float* dst, int64_t ld_dst) {
  for (int64_t i = 0; i < rows; ++i) {
    const float* s = src + i * ld_src;
    float* d = dst + i * ld_dst;
    for (int64_t j = 0; j < cols; ++j) d[j] = round_to_bf16(s[j]);
  }
}
NTP_ISA_VARIANTS(round_rows, round_rows_body)

NTP_ISA_INLINE void round_rows_bits_body(const float* src, int64_t rows, int64_t cols,
                                         int64_t ld_src, uint16_t* dst, int64_t ld_dst) {
  for (int64_t i = 0; i < rows; ++i) {
    const float* s = src + i * ld_src;
    uint16_t* d = dst + i * ld_dst;
    for (int64_t j = 0; j < cols; ++j) d[j] = float_to_bf16(s[j]);
  }
}
NTP_ISA_VARIANTS(round_rows_bits, round_rows_bits_body)

// Rows per range: a split worth its hand-off.
int64_t row_grain(int64_t cols) { return std::max<int64_t>(1, 16384 / std::max<int64_t>(1, cols)); }
}  // namespace

void round_block_to_bf16(const float* src, int64_t rows, int64_t cols, int64_t ld_src, float* dst,
                         int64_t ld_dst) {
  // Element-wise: the same bits at any split.
  parallel_for(rows, row_grain(cols), [=](int64_t r0, int64_t r1) {
    round_rows(src + r0 * ld_src, r1 - r0, cols, ld_src, dst + r0 * ld_dst, ld_dst);
  });
}

void round_block_to_bf16_bits(const float* src, int64_t rows, int64_t cols, int64_t ld_src,
                              uint16_t* dst, int64_t ld_dst) {
  parallel_for(rows, row_grain(cols), [=](int64_t r0, int64_t r1) {
    round_rows_bits(src + r0 * ld_src, r1 - r0, cols, ld_src, dst + r0 * ld_dst, ld_dst);
  });
}

}  // namespace ntp::kernels::cpu
