// bfloat16: the top 16 bits of an IEEE float32 (sign, 8 exponent bits, 7 stored mantissa bits),
// and the one rounding every bf16 path of ntp uses (gemm_bf16.h).
//
// float_to_bf16 rounds to nearest, ties to even (RNE), on the bit pattern: finite values whose
// rounding exceeds the largest bf16 (0x7f7f = 3.3895e38) become +-inf, +-inf stay +-inf, NaN
// stays NaN (quieted: the top mantissa bit is set, so no payload rounds to inf), subnormals round
// like any other value (no flush to zero). The unit roundoff is u = 2^-8: |bf16(x) - x| <= 2^-8 |x|
// for normal x.
#pragma once

#include <bit>
#include <cstdint>

namespace ntp::kernels::cpu {

[[gnu::always_inline]] inline uint32_t bf16_round_bits(uint32_t bits) {
  const uint32_t rounded = (bits + 0x7fffu + ((bits >> 16) & 1u)) & 0xffff0000u;
  const uint32_t quiet_nan = (bits | 0x00400000u) & 0xffff0000u;
  return (bits & 0x7fffffffu) > 0x7f800000u ? quiet_nan : rounded;
}

// RNE to bf16, returned as its 16 bits.
[[gnu::always_inline]] inline uint16_t float_to_bf16(float x) {
  return static_cast<uint16_t>(bf16_round_bits(std::bit_cast<uint32_t>(x)) >> 16);
}
// Exact: every bf16 is a float32.
[[gnu::always_inline]] inline float bf16_to_float(uint16_t h) {
  return std::bit_cast<float>(static_cast<uint32_t>(h) << 16);
}
// The float32 value of bf16(x): x rounded to bf16 and widened back.
[[gnu::always_inline]] inline float round_to_bf16(float x) {
  return std::bit_cast<float>(bf16_round_bits(std::bit_cast<uint32_t>(x)));
}

// dst[i * ld_dst + j] = round_to_bf16(src[i * ld_src + j]) for a rows x cols block (vectorized,
// ISA variants as isa_dispatch.h; rows split over the kernel threads; dst may equal src).
void round_block_to_bf16(const float* src, int64_t rows, int64_t cols, int64_t ld_src, float* dst,
                         int64_t ld_dst);
// The same rounding stored as bf16 bits: dst[i * ld_dst + j] = float_to_bf16(src[i * ld_src + j]).
void round_block_to_bf16_bits(const float* src, int64_t rows, int64_t cols, int64_t ld_src,
                              uint16_t* dst, int64_t ld_dst);

}  // namespace ntp::kernels::cpu
