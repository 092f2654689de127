#include "power/boost_planner.h"

#include <algorithm>

namespace ntp::power {

BoostPlan plan_boost(const PowerModel& model, double speed, const DomainPowerSpec& spec) {
  NTP_CHECK(speed > 0 && speed <= 1.0 + 1e-12);
  NTP_CHECK(spec.headroom >= 0 && spec.surviving_gpus >= 0);
  BoostPlan plan;
  const double cap = std::min(1.0 + spec.headroom, model.max_factor());
  const double needed = 1.0 / speed;
  if (needed <= 1.0 + 1e-12) {
    plan.power_factor = 1.0;
    plan.speed = 1.0;
  } else if (needed <= model.throughput(cap)) {
    plan.power_factor = model.power_for_speedup(needed);
    plan.speed = 1.0;
  } else {
    plan.power_factor = cap;
    plan.speed = speed * model.throughput(cap);
  }
  plan.keeps_pace = plan.speed >= 1.0 - 1e-9;
  plan.speed = std::min(plan.speed, 1.0);
  plan.batch_share = plan.speed;
  plan.domain_watts = spec.surviving_gpus * spec.gpu_tdp_watts * plan.power_factor;
  plan.rack_budget_watts = spec.surviving_gpus * spec.gpu_tdp_watts * (1.0 + spec.headroom);
  return plan;
}

}  // namespace ntp::power
