#include "elastic/fault_spec.h"

#include <cmath>
#include <sstream>

namespace ntp::elastic {
namespace {

constexpr const char* kForm = "use kill|hang|repair:rank=R,at=STEP or at=SECONDSs (e.g. at=2.5s)";

bool parse_int(const std::string& text, long long* out) {
  try {
    std::size_t used = 0;
    *out = std::stoll(text, &used);
    return used == text.size();
  } catch (const std::exception&) {
    return false;
  }
}

bool parse_double(const std::string& text, double* out) {
  try {
    std::size_t used = 0;
    *out = std::stod(text, &used);
    return used == text.size() && std::isfinite(*out);
  } catch (const std::exception&) {
    return false;
  }
}

}  // namespace

const char* fault_kind_name(FaultKind kind) {
  switch (kind) {
    case FaultKind::kKill:
      return "kill";
    case FaultKind::kHang:
      return "hang";
    case FaultKind::kRepair:
      return "repair";
  }
  return "?";
}

Result<FaultSpec> parse_fault_spec(const std::string& text) {
  const auto colon = text.find(':');
  if (colon == std::string::npos) {
    return invalid_argument("--inject '" + text + "' has no kind: " + kForm);
  }
  FaultSpec spec;
  const std::string kind = text.substr(0, colon);
  if (kind == "kill") {
    spec.kind = FaultKind::kKill;
  } else if (kind == "hang") {
    spec.kind = FaultKind::kHang;
  } else if (kind == "repair") {
    spec.kind = FaultKind::kRepair;
  } else {
    return invalid_argument("--inject '" + text + "': unknown fault '" + kind + "'; " + kForm);
  }
  bool have_rank = false;
  std::stringstream fields(text.substr(colon + 1));
  std::string field;
  while (std::getline(fields, field, ',')) {
    const auto eq = field.find('=');
    const std::string key = field.substr(0, eq);
    const std::string value = eq == std::string::npos ? "" : field.substr(eq + 1);
    if (key == "rank") {
      long long rank = 0;
      if (!parse_int(value, &rank) || rank < 0 || rank > 1'000'000) {
        return invalid_argument("--inject '" + text + "': rank '" + value +
                                "' is not a rank; use rank=R with R >= 0");
      }
      spec.rank = static_cast<int>(rank);
      have_rank = true;
    } else if (key == "at") {
      long long step = 0;
      double seconds = 0;
      if (!value.empty() && value.back() == 's' &&
          parse_double(value.substr(0, value.size() - 1), &seconds) && seconds >= 0) {
        spec.seconds = seconds;
      } else if (parse_int(value, &step) && step >= 0) {
        spec.step = step;
      } else {
        return invalid_argument("--inject '" + text + "': at='" + value +
                                "' is neither a step (at=12) nor seconds (at=2.5s)");
      }
    } else {
      return invalid_argument("--inject '" + text + "': unknown field '" + key + "'; " + kForm);
    }
  }
  if (!have_rank || (!spec.step && !spec.seconds)) {
    return invalid_argument("--inject '" + text + "' needs both rank= and at=; " + kForm);
  }
  return spec;
}

Result<ChaosSpec> parse_chaos_spec(const std::string& text) {
  const auto comma = text.find(',');
  long long seed = 0;
  double rate = 0;
  if (comma == std::string::npos || !parse_int(text.substr(0, comma), &seed) || seed < 0 ||
      !parse_double(text.substr(comma + 1), &rate) || rate <= 0) {
    return invalid_argument("--chaos '" + text +
                            "' is not SEED,RATE: use e.g. --chaos 7,0.5 (seed >= 0, RATE > 0 "
                            "faults per second)");
  }
  return ChaosSpec{static_cast<std::uint64_t>(seed), rate};
}

}  // namespace ntp::elastic
