// The simulator's per-trial results for `ntp.sim` (Python): one record per trial and policy, the
// values `ntp sim --json`'s means are taken over (sim::run_monte_carlo's TrialRecord).
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/status.h"

namespace ntp::api {

// Loads the TOML config at `config_path` with `overrides` ("section.key=value", as `ntp sim
// --set`), runs its trials and returns a JSON array of flat records:
//   {"trial", "policy", "throughput_loss", "goodput", "energy_mwh", "energy_per_work",
//    "paused_hours", "down_hours", "pauses", "restarts", "spares_needed", "fail_slow_loss",
//    "fail_slow_goodput_loss"}
// (the fields of docs/sim.md's JSON, per trial). Errors are the config loader's
// (kInvalidArgument naming the key, kNotFound for a missing file).
Result<nlohmann::ordered_json> sim_trial_records(const std::string& config_path,
                                                 const std::vector<std::string>& overrides);

}  // namespace ntp::api
