#include "power/power_control.h"

#include <cmath>
#include <string>

namespace ntp::power {

Status RecordingPowerControl::set_domain_power(int domain, double power_factor) {
  if (domain < 0 || !(power_factor > 0.0) || !std::isfinite(power_factor)) {
    return invalid_argument("power setting for domain " + std::to_string(domain) + " to " +
                            std::to_string(power_factor) + " x TDP is not valid");
  }
  settings_.push_back({domain, power_factor});
  return ok_status();
}

double RecordingPowerControl::current(int domain) const {
  for (auto it = settings_.rbegin(); it != settings_.rend(); ++it) {
    if (it->domain == domain) return it->power_factor;
  }
  return 1.0;
}

}  // namespace ntp::power
