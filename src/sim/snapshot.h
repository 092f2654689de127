// Snapshot analysis: the steady throughput of each policy with a given fraction of GPUs failed.
//
// This is the NTP paper's "throughput loss vs failed-GPU fraction" experiment: failed GPUs are
// placed uniformly at random (distinct GPUs, one GPU per failure), and each policy's capacity is
// evaluated with no transients (restarts, lost work) -- only what the degraded cluster can do.
#pragma once

#include <vector>

#include "core/rng.h"
#include "sim/config.h"

namespace ntp::sim {

struct SnapshotResult {
  double failed_fraction = 0;
  std::int64_t failed_gpus = 0;
  std::vector<double> loss;           // per policy: 1 - capacity / failure-free, mean over trials
  std::vector<double> loss_ci;        // 95% half-width over trials
  std::vector<double> spare_domains;  // per policy: mean spare domains to restore the full batch
};

// `config` must be validated. Runs config.run.trials placements from config.run.seed.
SnapshotResult snapshot(const SimConfig& config, double failed_fraction);

}  // namespace ntp::sim
