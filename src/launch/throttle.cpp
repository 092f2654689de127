#include "launch/throttle.h"

#include <cmath>
#include <cstdio>
#include <sstream>
#include <string>

namespace ntp::launch {

std::optional<Throttle> throttle_from_env(const EnvLookup& env) {
  const std::optional<std::string> value = env("NTP_THROTTLE");
  if (!value) return std::nullopt;
  std::stringstream fields(*value);
  std::string factor, at, until;
  std::getline(fields, factor, ',');
  std::getline(fields, at, ',');
  std::getline(fields, until, ',');
  try {
    Throttle t;
    std::size_t used = 0;
    t.factor = std::stod(factor, &used);
    const bool factor_ok = used == factor.size() && t.factor > 0 && t.factor <= 1;
    t.at = std::stoll(at, &used);
    bool ok = factor_ok && used == at.size() && t.at >= 0;
    if (!until.empty()) {
      t.until = std::stoll(until, &used);
      ok = ok && used == until.size() && *t.until > t.at;
    }
    if (ok) return t;
  } catch (const std::exception&) {
  }
  std::fprintf(stderr, "NTP_THROTTLE='%s' is not FACTOR,AT[,UNTIL]: ignored\n", value->c_str());
  return std::nullopt;
}

double throttle_factor(int64_t step) {
  static const std::optional<Throttle> throttle = throttle_from_env(process_env());
  if (!throttle || step < throttle->at || (throttle->until && step >= *throttle->until)) {
    return 1.0;
  }
  return throttle->factor;
}

}  // namespace ntp::launch
