#include "power/power_model.h"

#include <cmath>
#include <string>

namespace ntp::power {

namespace {
// Solves 1 - a x - b x^2 = ppw at two points x1, x2 for (a, b).
bool solve(double x1, double l1, double x2, double l2, double& a, double& b) {
  const double det = x1 * x2 * x2 - x2 * x1 * x1;
  if (std::abs(det) < 1e-15) return false;
  a = (l1 * x2 * x2 - l2 * x1 * x1) / det;
  b = (x1 * l2 - x2 * l1) / det;
  return true;
}
}  // namespace

PowerModel::PowerModel() : PowerModel(0.235, 0.45) {}

PowerModel::PowerModel(double a, double b) : a_(a), b_(b) {
  // throughput(x) = (1 + x)(1 - a x - b x^2); derivative 1 - a - 2(a + b) x - 3 b x^2 = 0.
  double x_peak = 1.0;
  if (b_ > 0) {
    const double qa = 3 * b_, qb = 2 * (a_ + b_), qc = -(1 - a_);
    x_peak = (-qb + std::sqrt(qb * qb - 4 * qa * qc)) / (2 * qa);
  } else if (a_ > 0) {
    x_peak = (1 - a_) / (2 * a_);
  }
  max_factor_ = 1.0 + std::max(0.0, x_peak);
}

Result<PowerModel> PowerModel::fit(const PowerCalibration& c) {
  double a = 0, b = 0;
  const double x1 = c.factor_1 - 1, x2 = c.factor_2 - 1;
  if (x1 <= 0 || x2 <= 0 || x1 == x2 ||
      !solve(x1, 1 - c.perf_per_watt_1, x2, 1 - c.perf_per_watt_2, a, b)) {
    return invalid_argument("power calibration needs two distinct power factors above 1.0");
  }
  if (a < 0 || a >= 1) {
    return invalid_argument("power calibration gives perf/W slope " + std::to_string(a) +
                            "; perf/W must fall with power (slope in [0, 1))");
  }
  return PowerModel(a, b);
}

double PowerModel::perf_per_watt(double power_factor) const {
  NTP_CHECK(power_factor >= 1.0 - 1e-12 && power_factor <= max_factor_ + 1e-12);
  const double x = power_factor - 1;
  return 1 - a_ * x - b_ * x * x;
}

double PowerModel::throughput(double power_factor) const {
  return power_factor * perf_per_watt(power_factor);
}

double PowerModel::power_for_speedup(double speedup) const {
  NTP_CHECK(speedup >= 1.0 - 1e-12 && speedup <= throughput(max_factor_) + 1e-12);
  double lo = 1.0, hi = max_factor_;
  for (int i = 0; i < 60; ++i) {
    const double mid = 0.5 * (lo + hi);
    (throughput(mid) < speedup ? lo : hi) = mid;
  }
  return hi;
}

}  // namespace ntp::power
