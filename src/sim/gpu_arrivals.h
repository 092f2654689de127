// The cluster-level stream of a per-GPU Poisson process, which FailureProcess (failures.h) and
// SlowProcess (slow_events.h) both draw: every one of `gpus` GPUs has events at the same rate, so
// the cluster has them at gpus times that rate, one exponential per event (O(events), not
// O(GPUs)), each on a uniformly drawn GPU. An event on a GPU that is already down or slow changes
// nothing (thinning: the engine drops it), which keeps each GPU's rate exact.
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/rng.h"

namespace ntp::sim {

// Events per second over `gpus` GPUs that each have rate_per_gpu_day x rate_multiplier a day.
double cluster_rate_per_s(std::int64_t gpus, double rate_per_gpu_day, double rate_multiplier);

class GpuArrivals {
 public:
  struct Arrival {
    double time_s;  // infinite: no more events
    std::int64_t gpu;
  };

  // Events at `rate_per_s` over the cluster (none when <= 0), starting after `start_s`.
  GpuArrivals(std::int64_t gpus, double rate_per_s, double start_s);
  // The next event, drawn from `rng` (the time, then the GPU); with no rate, infinite time and
  // nothing drawn.
  Arrival next(Rng& rng);
  double rate_per_s() const { return rate_; }

 private:
  std::int64_t gpus_;
  double rate_, time_s_;
};

// The index among `n` choices, weight(k) each, that `pick` (uniform in [0, sum of the weights))
// falls in; the last one when rounding carries it past the end.
template <class Weight>
std::size_t pick_weighted(double pick, std::size_t n, Weight&& weight) {
  std::size_t i = 0;
  while (i + 1 < n && pick >= weight(i)) {
    pick -= weight(i);
    ++i;
  }
  return i;
}

}  // namespace ntp::sim
