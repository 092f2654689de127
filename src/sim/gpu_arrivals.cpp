#include "sim/gpu_arrivals.h"

#include <limits>

namespace ntp::sim {

double cluster_rate_per_s(std::int64_t gpus, double rate_per_gpu_day, double rate_multiplier) {
  return static_cast<double>(gpus) * rate_per_gpu_day * rate_multiplier / 86400.0;
}

GpuArrivals::GpuArrivals(std::int64_t gpus, double rate_per_s, double start_s)
    : gpus_(gpus), rate_(rate_per_s), time_s_(start_s) {}

GpuArrivals::Arrival GpuArrivals::next(Rng& rng) {
  if (rate_ <= 0) return {std::numeric_limits<double>::infinity(), 0};
  time_s_ += rng.exponential(rate_);
  return {time_s_, static_cast<std::int64_t>(rng.below(static_cast<std::uint64_t>(gpus_)))};
}

}  // namespace ntp::sim
