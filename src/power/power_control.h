// PowerControl: how the runtime asks for a domain's power limit to change (power boosting).
//
// With the `keep` batch policy a degraded replica processes a healthy replica's share at fewer
// devices; boosting the power of its surviving devices (the planner in power/boost_planner.h
// chooses how much, within the rack budget) buys the speed back. Backends: on CPU a recorder
// (nothing there has a power limit to raise); NVML (nvmlDeviceSetPowerManagementLimit) comes with
// the GPU backend.
#pragma once

#include <vector>

#include "core/status.h"

namespace ntp::power {

class PowerControl {
 public:
  virtual ~PowerControl() = default;
  // Sets every surviving device of `domain` to `power_factor` x its TDP (1 = no boost).
  virtual Status set_domain_power(int domain, double power_factor) = 0;
  // The factor `domain` runs at now (1 when never changed).
  virtual double current(int domain) const = 0;
};

// Records the settings instead of applying them.
class RecordingPowerControl final : public PowerControl {
 public:
  struct Setting {
    int domain = 0;
    double power_factor = 1.0;
  };
  Status set_domain_power(int domain, double power_factor) override;
  const std::vector<Setting>& settings() const { return settings_; }
  double current(int domain) const override;  // the factor last set

 private:
  std::vector<Setting> settings_;
};

}  // namespace ntp::power
