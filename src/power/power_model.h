// Throughput of a GPU as a function of its power limit, calibrated to the NTP paper.
//
// The paper measures perf/W at raised power limits: 1.1x power costs 2.8% perf/W and 1.2x power
// costs 6.5% perf/W. With x = power_factor - 1 we fit perf/W(x) = 1 - a x - b x^2 through both
// points exactly (a = 0.235, b = 0.45), so throughput(x) = (1 + x) * perf/W(x):
//   throughput(1.1) = 1.0692, throughput(1.2) = 1.1220, throughput(1.3) = 1.1557.
// The model is only used for power factors in [1, max_factor()]: below 1 is outside the
// calibration, and above max_factor() the fitted throughput would start to fall.
#pragma once

#include "core/status.h"

namespace ntp::power {

struct PowerCalibration {
  // (power factor, perf/W relative to factor 1.0) pairs the quadratic passes through.
  double factor_1 = 1.1, perf_per_watt_1 = 1.0 - 0.028;
  double factor_2 = 1.2, perf_per_watt_2 = 1.0 - 0.065;
};

class PowerModel {
 public:
  // The paper's calibration.
  PowerModel();
  // Fits the quadratic through two other points; fails when they do not give a perf/W that falls
  // with power (a >= 0 required for a physically sensible model).
  static Result<PowerModel> fit(const PowerCalibration& calibration);

  // perf/W relative to running at TDP; factor in [1, max_factor()].
  double perf_per_watt(double power_factor) const;
  // Throughput relative to running at TDP; increasing on [1, max_factor()].
  double throughput(double power_factor) const;
  // The least power factor whose throughput reaches `speedup`; speedup in [1, throughput(max)].
  double power_for_speedup(double speedup) const;
  // Where d throughput / d power reaches 0: boosting beyond this only wastes power.
  double max_factor() const { return max_factor_; }

  double linear_coefficient() const { return a_; }
  double quadratic_coefficient() const { return b_; }

 private:
  PowerModel(double a, double b);
  double a_, b_, max_factor_;
};

}  // namespace ntp::power
