// The power-boost planner: the least boost that lets a degraded scale-up domain keep pace.
//
// A domain whose TP degree fell from `full_degree` to a lower one runs at `speed` (< 1) of a
// healthy domain (compute and TP communication at the reduced degree, from the workload model).
// Raising the power limit of its surviving GPUs by a factor p speeds it up by
// PowerModel::throughput(p). The rack allows each surviving GPU at most (1 + headroom) x TDP (the
// paper: +30%), so the plan is the least p with speed * throughput(p) >= 1, capped at min(1 +
// headroom, max_factor()); when the cap is not enough the domain also takes proportionally fewer
// samples (the `scale` policy) for the remaining gap.
#pragma once

#include "power/power_model.h"

namespace ntp::power {

struct BoostPlan {
  double power_factor = 1.0;       // per surviving GPU, x TDP
  double speed = 1.0;              // achieved speed relative to a healthy domain, <= 1
  bool keeps_pace = true;          // speed reached 1 (within 1e-9) without scaling the batch
  double batch_share = 1.0;        // fraction of a healthy replica's samples it processes (= speed)
  double domain_watts = 0.0;       // surviving GPUs x TDP x power_factor
  double rack_budget_watts = 0.0;  // surviving GPUs x TDP x (1 + headroom)
};

struct DomainPowerSpec {
  int surviving_gpus = 0;
  double gpu_tdp_watts = 1000.0;
  double headroom = 0.3;  // extra fraction of TDP the rack can give each surviving GPU
};

// speed in (0, 1]: the unboosted relative speed of the degraded domain.
BoostPlan plan_boost(const PowerModel& model, double speed, const DomainPowerSpec& spec);

// Energy accounting: joules for `gpus` running at `power_factor` x TDP for `seconds`.
inline double energy_joules(double gpus, double tdp_watts, double power_factor, double seconds) {
  return gpus * tdp_watts * power_factor * seconds;
}

}  // namespace ntp::power
