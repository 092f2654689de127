// Fail-slow events: when a GPU slows down, to what fraction of its speed, and for how long.
//
// Every GPU starts a fail-slow episode as a Poisson process of rate fail_slow.rate_per_gpu_day x
// fail_slow.rate_multiplier; the episode's speed factor is fail_slow.factors[i] with probability
// proportional to fail_slow.factor_weights[i], and it lasts an exponential time of mean
// fail_slow.mean_hours, after which the GPU runs at full speed again. Like FailureProcess, the
// cluster-level stream costs one exponential per event; an episode that starts on a GPU already
// slow changes nothing (thinning: the engine drops it), which keeps each GPU's rate exact.
// The stream is drawn from its own Rng, so enabling fail-slow leaves the failure stream unchanged.
#pragma once

#include <cstdint>

#include "core/rng.h"
#include "core/status.h"
#include "sim/config.h"
#include "sim/gpu_arrivals.h"

namespace ntp::sim {

struct SlowEvent {
  double time_s = 0;  // start of the episode (infinite: no more episodes)
  std::int64_t gpu = 0;
  double factor = 1;      // speed while slow, in (0, 1]
  double duration_s = 0;  // the GPU recovers at time_s + duration_s
};

class SlowProcess {
 public:
  // Episodes start after `start_s` (negative for a warm-up before time 0). No episodes at all
  // unless config.fail_slow.active().
  SlowProcess(const SimConfig& config, Rng rng, double start_s);
  SlowEvent next();
  // Episodes per second over the whole cluster (0 when inactive).
  double cluster_rate() const { return arrivals_.rate_per_s(); }

 private:
  const FailSlowConfig& f_;
  Rng rng_;
  GpuArrivals arrivals_;
  double weight_total_ = 0;
  // factor_weights[i], or 1 when they are not given (equal weights).
  double factor_weight(std::size_t i) const;
};

// The [fail_slow] checks validate() makes: factors in (0, 1], weights (when given) as many as the
// factors, >= 0 and not all 0. Errors name the key, the value and the fix.
Status validate_fail_slow(const FailSlowConfig& config);

}  // namespace ntp::sim
