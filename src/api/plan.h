// The cluster plan of `ntp plan` and `ntp.plan` (Python): a request (cluster, model shape,
// failures, repairs, sync strategy) -> the healthy, degraded and repaired layouts with their
// reshard plans, and the JSON document of docs/plan-json.md. One routine for both front ends, so
// the Python objects hold exactly what `ntp plan --json` prints.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "core/status.h"
#include "shard/cluster_layout.h"
#include "shard/reshard_plan.h"
#include "shard/unit_space.h"

namespace ntp::api {

// What `ntp plan`'s flags say. `failed` and `repair` are DOMAIN:SLOT[,...] lists; the error
// messages name the flags (--failed, --heads, ...), which the Python front end shares.
struct PlanRequest {
  int domains = 0;
  int tp = 0;
  int min_tp = 1;
  std::string failed;
  std::string repair;
  shard::ModelShape shape;  // hidden 0 = 128 x heads
  shard::ByteCosts bytes;
  std::string strategy = "fold";  // fold or native
  // A MoE's routed tokens per expert as a router measured them (empty: none): a replica below its
  // full degree places its experts by these loads, as the trainer does (shard/load_layout.h).
  std::vector<double> expert_loads;
};

// Everything one plan computed.
struct PlanResult {
  shard::ModelShape shape;
  shard::ClusterLayout healthy;                  // no failures
  shard::ClusterLayout degraded;                 // with `failed`
  shard::ReshardPlan on_failure;                 // healthy -> degraded
  std::optional<shard::ClusterLayout> repaired;  // with `repair`
  std::optional<shard::ReshardPlan> on_repair;   // degraded -> repaired
};

// kInvalidArgument naming the bad value and the fix (the flag's name) for a bad request.
Result<PlanResult> compute_plan(PlanRequest request);

// The document of docs/plan-json.md.
nlohmann::json plan_to_json(const PlanResult& result);

}  // namespace ntp::api
