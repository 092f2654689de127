#include "sim/snapshot.h"

#include <cmath>

#include "power/power_model.h"
#include "sim/cluster_state.h"
#include "sim/stats.h"
#include "sim/workload.h"

namespace ntp::sim {

SnapshotResult snapshot(const SimConfig& config, double failed_fraction) {
  const Workload workload(config);
  const power::PowerModel model;
  const std::size_t n = config.run.policies.size();
  SnapshotResult out;
  out.failed_fraction = failed_fraction;
  out.failed_gpus = std::llround(failed_fraction * static_cast<double>(config.system.gpus));
  std::vector<RunningStat> loss(n), spares(n);
  const Rng base(config.run.seed);
  for (int trial = 0; trial < config.run.trials; ++trial) {
    Rng rng = base.fork(0x5a5a0000ULL + static_cast<std::uint64_t>(trial));
    ClusterState state(config, workload, model);
    while (state.failed_gpus() < out.failed_gpus) {
      state.fail(
          static_cast<std::int64_t>(rng.below(static_cast<std::uint64_t>(config.system.gpus))), 1);
    }
    for (std::size_t i = 0; i < n; ++i) {
      const PolicyRates r = state.rates(config.run.policies[i]);
      loss[i].add(1.0 - r.capacity / static_cast<double>(state.replicas()));
      spares[i].add(std::ceil(std::max(0.0, r.need_groups) / state.groups_per_domain() - 1e-9));
    }
  }
  for (std::size_t i = 0; i < n; ++i) {
    out.loss.push_back(loss[i].mean());
    out.loss_ci.push_back(loss[i].ci95());
    out.spare_domains.push_back(spares[i].mean());
  }
  return out;
}

}  // namespace ntp::sim
