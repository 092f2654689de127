// Monte Carlo statistics: running mean and a 95% confidence half-width (normal approximation,
// 1.96 x sample standard deviation / sqrt(n); 0 for fewer than two samples).
#pragma once

#include <cmath>
#include <cstdint>

namespace ntp::sim {

class RunningStat {
 public:
  // Welford's update: numerically stable for long runs.
  void add(double x) {
    ++n_;
    const double d = x - mean_;
    mean_ += d / static_cast<double>(n_);
    m2_ += d * (x - mean_);
  }
  std::int64_t count() const { return n_; }
  double mean() const { return mean_; }
  double stddev() const { return n_ > 1 ? std::sqrt(m2_ / static_cast<double>(n_ - 1)) : 0.0; }
  double ci95() const {
    return n_ > 1 ? 1.96 * stddev() / std::sqrt(static_cast<double>(n_)) : 0.0;
  }

 private:
  std::int64_t n_ = 0;
  double mean_ = 0, m2_ = 0;
};

}  // namespace ntp::sim
