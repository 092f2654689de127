#include "api/sim_trials.h"

#include "sim/config.h"
#include "sim/engine.h"
#include "sim/report.h"

namespace ntp::api {

Result<nlohmann::ordered_json> sim_trial_records(const std::string& config_path,
                                                 const std::vector<std::string>& overrides) {
  NTP_ASSIGN_OR_RETURN(const sim::SimConfig config, sim::load_config(config_path, overrides));
  NTP_ASSIGN_OR_RETURN(const sim::Simulator simulator, sim::Simulator::create(config));
  std::vector<sim::TrialRecord> records;
  sim::run_monte_carlo(simulator, false, {}, &records);
  nlohmann::ordered_json out = nlohmann::ordered_json::array();
  for (const sim::TrialRecord& r : records) {
    const sim::PolicyOutcome& o = r.outcome;
    out.push_back({{"trial", r.trial},
                   {"policy", r.policy},
                   {"throughput_loss", o.throughput_loss},
                   {"goodput", o.goodput},
                   {"energy_mwh", o.energy_mwh},
                   {"energy_per_work", o.energy_per_work},
                   {"paused_hours", o.paused_hours},
                   {"down_hours", o.down_hours},
                   {"pauses", o.pauses},
                   {"restarts", o.restarts},
                   {"spares_needed", o.spares_needed},
                   {"fail_slow_loss", o.fail_slow_loss},
                   {"fail_slow_goodput_loss", r.fail_slow_goodput_loss}});
  }
  return out;
}

}  // namespace ntp::api
