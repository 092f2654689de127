// Compiles a kernel body once per instruction set and calls the variant of active_isa() (isa.h).
//
//   NTP_ISA_INLINE void scale_body(float* x, int64_t n, float f) { ...plain loop... }
//   NTP_ISA_VARIANTS(scale_rows, scale_body)   // defines scale_rows(x, n, f)
//
// The body is an always-inline function in portable C++; each variant is a function with a GCC
// target attribute into which the body is inlined, so the vectorizer emits SSE2, AVX2 or AVX-512
// code for the same source. Helpers the body calls should be inline too (fast_exp is).
#pragma once

#include "kernels/cpu/isa.h"

#define NTP_ISA_INLINE [[gnu::always_inline]] inline
#define NTP_TARGET_AVX2 __attribute__((target("avx2,fma")))
#define NTP_TARGET_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx2,fma")))

#define NTP_ISA_VARIANTS(name, body)                   \
  template <class... Args>                             \
  NTP_TARGET_AVX512 auto name##_avx512(Args... args) { \
    return body(args...);                              \
  }                                                    \
  template <class... Args>                             \
  NTP_TARGET_AVX2 auto name##_avx2(Args... args) {     \
    return body(args...);                              \
  }                                                    \
  template <class... Args>                             \
  auto name(Args... args) {                            \
    switch (::ntp::kernels::cpu::active_isa()) {       \
      case ::ntp::kernels::cpu::Isa::kAvx512:          \
        return name##_avx512(args...);                 \
      case ::ntp::kernels::cpu::Isa::kAvx2:            \
        return name##_avx2(args...);                   \
      case ::ntp::kernels::cpu::Isa::kBaseline:        \
        break;                                         \
    }                                                  \
    return body(args...);                              \
  }
