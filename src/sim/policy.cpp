#include "sim/policy.h"

#include <charconv>
#include <optional>

#include "core/named_values.h"

namespace ntp::sim {

namespace {

std::string base_name(const PolicySpec& spec) {
  switch (spec.kind) {
    case PolicyKind::kDpDrop:
      return "DP-DROP";
    case PolicyKind::kSpares:
      return "SPARES(" + std::to_string(spec.spares) + ")";
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

constexpr NamedValue<SlowMitigation> kMitigationNames[] = {
    {SlowMitigation::kUnmitigated, "UNMITIGATED"},
    {SlowMitigation::kShare, "SHARE"},
    {SlowMitigation::kRebalance, "REBALANCE"},
    {SlowMitigation::kBoost, "BOOST"},
    {SlowMitigation::kDrop, "DROP"}};

Result<PolicySpec> parse_base(const std::string& text) {
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

}  // namespace

std::string mitigation_name(SlowMitigation slow) { return name_of(kMitigationNames, slow); }

std::string PolicySpec::name() const {
  const std::string base = base_name(*this);
  return slow == SlowMitigation::kUnmitigated ? base : base + "+" + mitigation_name(slow);
}

Result<PolicySpec> parse_policy(const std::string& text) {
  const auto plus = text.find('+');
  NTP_ASSIGN_OR_RETURN(PolicySpec spec, parse_base(text.substr(0, plus)));
  if (plus == std::string::npos) return spec;
  const std::string suffix = text.substr(plus + 1);
  const std::optional<SlowMitigation> slow = value_named(kMitigationNames, suffix);
  if (!slow) {
    return invalid_argument("policy '" + text + "': unknown fail-slow mitigation '" + suffix +
                            "'; use +UNMITIGATED, +SHARE, +REBALANCE, +BOOST or +DROP");
  }
  spec.slow = *slow;
  if (spec.slow == SlowMitigation::kRebalance && !is_ntp(spec.kind)) {
    return invalid_argument("policy '" + text +
                            "': REBALANCE needs an NTP policy (uniform TP cannot give one rank "
                            "fewer units); use NTP+REBALANCE or " +
                            base_name(spec) + "+SHARE");
  }
  if (spec.slow == SlowMitigation::kBoost && !boosts_power(spec.kind)) {
    return invalid_argument("policy '" + text +
                            "': BOOST needs a power-boosting policy; use NTP-PW+BOOST or "
                            "NTP-PW-LIVE+BOOST");
  }
  return spec;
}

}  // namespace ntp::sim
