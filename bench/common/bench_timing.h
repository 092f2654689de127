// Timing helpers the benches share: a call's wall time, moments and spans between them, and the
// median of repeated figures.
#pragma once

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <vector>

namespace ntp::bench {

// Wall-clock seconds (steady_clock) that fn() takes.
template <typename Fn>
double seconds_of(Fn&& fn) {
  const auto start = std::chrono::steady_clock::now();
  fn();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// steady_clock now, in ns: the moments a bench's threads record.
inline std::int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// Seconds from `from` to `to` (now_ns's), to 0.1 ms: what the control-plane benches resolve.
inline double span_s(std::int64_t from, std::int64_t to) {
  return std::round(1e-5 * static_cast<double>(to - from)) / 1e4;
}

// The upper median of `v`; 0 when it is empty.
inline double median(std::vector<double> v) {
  if (v.empty()) return 0.0;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace ntp::bench
