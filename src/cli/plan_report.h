// Rendering of `ntp plan` results: a human report and the JSON document of docs/plan-json.md.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "shard/cluster_layout.h"
#include "shard/reshard_plan.h"
#include "shard/unit_space.h"

namespace ntp::cli {

// Everything one `ntp plan` run computed.
struct PlanResult {
  shard::ModelShape shape;
  shard::ClusterLayout healthy;                  // no failures
  shard::ClusterLayout degraded;                 // with --failed
  shard::ReshardPlan on_failure;                 // healthy -> degraded
  std::optional<shard::ClusterLayout> repaired;  // with --repair
  std::optional<shard::ReshardPlan> on_repair;   // degraded -> repaired
};

// The human report. `details` adds every rank's units, every fold and every transfer.
std::string render_plan_text(const PlanResult& result, bool details);

nlohmann::json plan_to_json(const PlanResult& result);

}  // namespace ntp::cli
