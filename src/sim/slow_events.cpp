#include "sim/slow_events.h"

#include <limits>

namespace ntp::sim {

SlowProcess::SlowProcess(const SimConfig& config, Rng rng, double start_s)
    : f_(config.fail_slow),
      rng_(rng),
      arrivals_(config.system.gpus,
                f_.active() ? cluster_rate_per_s(config.system.gpus, f_.rate_per_gpu_day,
                                                 f_.rate_multiplier)
                            : 0.0,
                start_s) {
  for (std::size_t i = 0; i < f_.factors.size(); ++i) weight_total_ += factor_weight(i);
}

double SlowProcess::factor_weight(std::size_t i) const {
  return f_.factor_weights.empty() ? 1.0 : f_.factor_weights[i];
}

SlowEvent SlowProcess::next() {
  SlowEvent e;
  const GpuArrivals::Arrival at = arrivals_.next(rng_);
  e.time_s = at.time_s;
  if (at.time_s == std::numeric_limits<double>::infinity()) return e;
  e.gpu = at.gpu;
  const std::size_t i = pick_weighted(rng_.uniform() * weight_total_, f_.factors.size(),
                                      [this](std::size_t k) { return factor_weight(k); });
  e.factor = f_.factors[i];
  e.duration_s = rng_.exponential(1.0 / (f_.mean_hours * 3600.0));
  return e;
}

Status validate_fail_slow(const FailSlowConfig& f) {
  if (f.factors.empty()) {
    return invalid_argument("fail_slow.factors is empty; give at least one speed factor in (0, 1]");
  }
  for (double x : f.factors) {
    if (!(x > 0 && x <= 1)) {
      return invalid_argument("fail_slow.factors entry " + config_number(x) +
                              " is outside (0, 1]; a factor is the slowed GPU's fraction of its "
                              "normal speed, e.g. 0.5");
    }
  }
  if (f.factor_weights.empty()) return ok_status();
  if (f.factor_weights.size() != f.factors.size()) {
    return invalid_argument("fail_slow.factor_weights has " +
                            std::to_string(f.factor_weights.size()) + " entries for " +
                            std::to_string(f.factors.size()) +
                            " fail_slow.factors; give one weight per factor (or none: equal)");
  }
  double total = 0;
  for (double w : f.factor_weights) {
    if (!(w >= 0)) {
      return invalid_argument("fail_slow.factor_weights entry " + config_number(w) +
                              " is negative; weights must be >= 0");
    }
    total += w;
  }
  if (total <= 0) {
    return invalid_argument("fail_slow.factor_weights sum to 0; give at least one positive weight");
  }
  return ok_status();
}

}  // namespace ntp::sim
