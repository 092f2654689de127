// Sums that vectorize without reassociation: term(i) goes to partial sum i % 16, and the 16
// partial sums are added in a fixed order at the end. The order of additions, hence the result,
// depends only on n and the terms, never on the ISA variant (isa.h) or vector width; GCC turns the
// 16 independent chains into vector adds where a single running sum would stay scalar.
#pragma once

#include <cstdint>

namespace ntp::kernels::cpu {

template <class T, class Term>
[[gnu::always_inline]] inline T lane_sum(int64_t n, Term term) {
  constexpr int64_t kLanes = 16;
  T lanes[kLanes] = {};
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    for (int64_t l = 0; l < kLanes; ++l) lanes[l] += term(i + l);
  }
  for (int64_t l = 0; i < n; ++i, ++l) lanes[l] += term(i);
  T s = 0;
  for (int64_t l = 0; l < kLanes; ++l) s += lanes[l];
  return s;
}

// max(x[0], ..., x[n-1]) for n >= 1 in 16 lanes (a maximum does not depend on the order, but GCC
// vectorizes the single-chain form only under -ffinite-math-only).
[[gnu::always_inline]] inline float lane_max(const float* x, int64_t n) {
  constexpr int64_t kLanes = 16;
  float lanes[kLanes];
  for (int64_t l = 0; l < kLanes; ++l) lanes[l] = x[0];
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    for (int64_t l = 0; l < kLanes; ++l) lanes[l] = x[i + l] > lanes[l] ? x[i + l] : lanes[l];
  }
  for (int64_t l = 0; i < n; ++i, ++l) lanes[l] = x[i] > lanes[l] ? x[i] : lanes[l];
  float m = lanes[0];
  for (int64_t l = 1; l < kLanes; ++l) m = lanes[l] > m ? lanes[l] : m;
  return m;
}

}  // namespace ntp::kernels::cpu
