// The human report of `ntp plan` (the JSON document is api::plan_to_json).
#pragma once

#include <string>

#include "api/plan.h"

namespace ntp::cli {

// The human report. `details` adds every rank's units, every fold and every transfer.
std::string render_plan_text(const api::PlanResult& result, bool details);

}  // namespace ntp::cli
