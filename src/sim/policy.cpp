#include "sim/policy.h"

#include <charconv>

namespace ntp::sim {

std::string PolicySpec::name() const {
  switch (kind) {
    case PolicyKind::kDpDrop:
      return "DP-DROP";
    case PolicyKind::kSpares:
      return "SPARES(" + std::to_string(spares) + ")";
    case PolicyKind::kCkptRestart:
      return "CKPT-RESTART";
    case PolicyKind::kNtp:
      return "NTP";
    case PolicyKind::kNtpPw:
      return "NTP-PW";
    case PolicyKind::kNtpLive:
      return "NTP-LIVE";
    case PolicyKind::kNtpPwLive:
      return "NTP-PW-LIVE";
  }
  return "?";
}

Result<PolicySpec> parse_policy(const std::string& text) {
  PolicySpec spec;
  if (text == "DP-DROP") {
    spec.kind = PolicyKind::kDpDrop;
  } else if (text == "CKPT-RESTART") {
    spec.kind = PolicyKind::kCkptRestart;
  } else if (text == "NTP") {
    spec.kind = PolicyKind::kNtp;
  } else if (text == "NTP-PW") {
    spec.kind = PolicyKind::kNtpPw;
  } else if (text == "NTP-LIVE") {
    spec.kind = PolicyKind::kNtpLive;
  } else if (text == "NTP-PW-LIVE") {
    spec.kind = PolicyKind::kNtpPwLive;
  } else if (text.rfind("SPARES(", 0) == 0 && text.size() > 8 && text.back() == ')') {
    const char* first = text.data() + 7;
    const char* last = text.data() + text.size() - 1;
    int n = -1;
    auto [ptr, ec] = std::from_chars(first, last, n);
    if (ec != std::errc() || ptr != last || n < 0) {
      return invalid_argument("policy '" + text +
                              "': the spare count must be a non-negative integer, e.g. SPARES(16)");
    }
    spec.kind = PolicyKind::kSpares;
    spec.spares = n;
  } else {
    return invalid_argument(
        "unknown policy '" + text +
        "'; use DP-DROP, SPARES(n), CKPT-RESTART, NTP, NTP-PW, NTP-LIVE or NTP-PW-LIVE");
  }
  return spec;
}

}  // namespace ntp::sim
