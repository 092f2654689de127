// Failure processes: where and when GPUs fail, and for how long.
//
// Random process: every GPU fails as a Poisson process of rate rate_per_gpu_day x rate_multiplier
// (the Llama 3 figure by default: 419 interruptions over 16,384 GPUs x 54 days). A failure takes
// down the aligned group of blast_sizes[i] GPUs around the GPU with probability proportional to
// blast_weights[i]. It is a hardware failure with probability hardware_fraction (repair time
// exponential, mean hardware_repair_hours) and a software failure otherwise (recovery exponential,
// mean software_recovery_hours). The cluster-level stream is drawn with one exponential per
// event, so its cost is O(events), not O(GPUs). A failure of GPUs that are already down changes
// nothing (thinning), which keeps each healthy GPU's rate exact.
//
// Trace replay: a CSV with the header `hours,gpu,kind,repair_hours` and an optional fifth column
// `blast` (GPUs taken down, aligned, default 1); kind is `hardware` or `software`; rows sorted by
// time.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/rng.h"
#include "core/status.h"
#include "sim/config.h"
#include "sim/gpu_arrivals.h"

namespace ntp::sim {

struct FailureEvent {
  double time_s = 0;
  std::int64_t first_gpu = 0;
  int count = 1;
  bool hardware = true;
  double repair_s = 0;
};

class FailureProcess {
 public:
  // Events start after `start_s` (negative for a warm-up before time 0).
  FailureProcess(const SimConfig& config, Rng rng, double start_s);
  FailureEvent next();
  // Failures per second over the whole cluster (0 when the rate is 0).
  double cluster_rate() const { return arrivals_.rate_per_s(); }

 private:
  const FailureConfig& f_;
  Rng rng_;
  GpuArrivals arrivals_;
  double weight_total_ = 0;
};

// Reads and checks a trace; errors name the line and the bad value.
Result<std::vector<FailureEvent>> load_trace(const std::string& path, const SimConfig& config);

}  // namespace ntp::sim
