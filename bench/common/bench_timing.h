// Timing helpers the benches share: a call's wall time and the median of repeated figures.
#pragma once

#include <algorithm>
#include <chrono>
#include <vector>

namespace ntp::bench {

// Wall-clock seconds (steady_clock) that fn() takes.
template <typename Fn>
double seconds_of(Fn&& fn) {
  const auto start = std::chrono::steady_clock::now();
  fn();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// The upper median of `v`; 0 when it is empty.
inline double median(std::vector<double> v) {
  if (v.empty()) return 0.0;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace ntp::bench
