#include "launch/fault_spec.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>

#include "core/named_values.h"

namespace ntp::launch {
namespace {

constexpr NamedValue<FaultKind> kFaultKindNames[] = {
    {FaultKind::kKill, "kill"},    {FaultKind::kHang, "hang"},         {FaultKind::kStall, "stall"},
    {FaultKind::kSlow, "slow"},    {FaultKind::kThrottle, "throttle"}, {FaultKind::kPoint, "point"},
    {FaultKind::kRepair, "repair"}};

constexpr const char* kForm =
    "use kill|hang|repair:rank=R,at=STEP or at=SECONDSs (e.g. at=2.5s), stall:rank=R,at=STEP, "
    "slow:rank=R,factor=F,at=WHEN[,until=STEP], throttle:rank=R,factor=F,at=STEP[,until=STEP], "
    "or point:phase=PHASE,at=STEP|*,rank=R|decider@E[,action=kill|fail|stop]";

// The phases train/fault_point.h places fault points at.
constexpr const char* kPhases[] = {
    "forward",      "backward",       "sync",          "wait",           "optimizer",
    "commit",       "checkpoint",     "admit",         "reform_agreed",  "reform_planned",
    "reform_build", "reform_reshard", "reform_commit", "decider_publish"};

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

bool slows(FaultKind kind) { return kind == FaultKind::kSlow || kind == FaultKind::kThrottle; }

// One "key=value" field into `spec`; an error message naming it, or empty.
std::string parse_field(const std::string& key, const std::string& value, FaultSpec* spec,
                        bool* have_rank) {
  if (key == "rank") {
    long long rank = 0;
    if (!parse_int(value, &rank) || rank < 0 || rank > 1'000'000) {
      return "rank '" + value + "' is not a rank; use rank=R with R >= 0";
    }
    spec->rank = static_cast<int>(rank);
    *have_rank = true;
  } else if (key == "at") {
    long long step = 0;
    double seconds = 0;
    if (!value.empty() && value.back() == 's' &&
        parse_double(value.substr(0, value.size() - 1), &seconds) && seconds >= 0) {
      spec->seconds = seconds;
    } else if (parse_int(value, &step) && step >= 0) {
      spec->step = step;
    } else {
      return "at='" + value + "' is neither a step (at=12) nor seconds (at=2.5s)";
    }
  } else if (key == "factor" && slows(spec->kind)) {
    if (!parse_double(value, &spec->factor) || !(spec->factor > 0) || spec->factor > 1) {
      return "factor='" + value +
             "' is not in (0, 1]: give the share of its speed the worker keeps, e.g. factor=0.5";
    }
  } else if (key == "until" && slows(spec->kind)) {
    long long step = 0;
    if (!parse_int(value, &step) || step < 0) {
      return "until='" + value + "' is not a step: use until=STEP (e.g. until=20)";
    }
    spec->until = step;
  } else {
    return "unknown field '" + key + "' for " + fault_kind_name(spec->kind) + "; " + kForm;
  }
  return "";
}

// Checks across fields; an error message, or empty.
std::string check_spec(const FaultSpec& spec, bool have_rank, bool have_factor) {
  if (!have_rank || (!spec.step && !spec.seconds))
    return std::string("needs both rank= and at=; ") + kForm;
  if ((spec.kind == FaultKind::kStall || spec.kind == FaultKind::kThrottle) && !spec.step) {
    return std::string("a ") + fault_kind_name(spec.kind) +
           " happens at a step of the training thread: use at=STEP (e.g. at=5), not seconds";
  }
  if (slows(spec.kind) && !have_factor) {
    return "a slowdown needs factor=F in (0, 1] (e.g. factor=0.5: half speed)";
  }
  if (spec.until && spec.step && *spec.until <= *spec.step) {
    return "until=" + std::to_string(*spec.until) +
           " must be after at=" + std::to_string(*spec.step) +
           ": give a later step, or drop until= (to the end)";
  }
  return "";
}

// point:phase=PHASE,at=STEP|*,rank=R|decider@E[,action=kill|fail|stop] as the NTP_FAULT_POINT item
// PHASE:STEP:RANK[:ACTION]; an error message naming the bad part, or empty.
std::string parse_point(const std::string& fields_text, FaultSpec* spec) {
  std::string phase, at, rank, action = "kill";
  std::stringstream fields(fields_text);
  for (std::string field; std::getline(fields, field, ',');) {
    const auto eq = field.find('=');
    const std::string key = field.substr(0, eq);
    const std::string value = eq == std::string::npos ? "" : field.substr(eq + 1);
    if (key == "phase") {
      phase = value;
    } else if (key == "at") {
      at = value;
    } else if (key == "rank") {
      rank = value;
    } else if (key == "action") {
      action = value;
    } else {
      return "unknown field '" + key + "' for point; " + kForm;
    }
  }
  if (phase.empty() || at.empty() || rank.empty()) {
    return std::string("needs phase=, at= and rank=; ") + kForm;
  }
  if (std::find(std::begin(kPhases), std::end(kPhases), phase) == std::end(kPhases)) {
    return "phase='" + phase + "' is not a fault point (train/fault_point.h lists them, e.g. " +
           "forward, optimizer, reform_build)";
  }
  long long step = 0;
  if (at != "*" && !(parse_int(at, &step) && step >= 0)) {
    return "at='" + at + "' is not a step: use at=STEP (e.g. at=5) or at=* (any step)";
  }
  long long number = -1;
  const bool role = rank.rfind("decider@", 0) == 0 && parse_int(rank.substr(8), &number);
  if (!role && !(parse_int(rank, &number) && number >= 0)) {
    return "rank='" + rank + "' is neither a rank nor a role: use rank=R or rank=decider@EPOCH";
  }
  if (action != "kill" && action != "fail" && action != "stop") {
    return "action='" + action + "' is not kill, fail or stop";
  }
  spec->rank = role ? -1 : static_cast<int>(number);
  if (at != "*") spec->step = step;
  spec->point = phase + ":" + at + ":" + rank + (action == "kill" ? "" : ":" + action);
  return "";
}

}  // namespace

const char* fault_kind_name(FaultKind kind) { return name_of(kFaultKindNames, kind); }

Result<FaultSpec> parse_fault_spec(const std::string& text) {
  const auto colon = text.find(':');
  if (colon == std::string::npos) {
    return invalid_argument("--inject '" + text + "' has no kind: " + kForm);
  }
  const std::string kind = text.substr(0, colon);
  const std::optional<FaultKind> parsed = value_named(kFaultKindNames, kind);
  if (!parsed) {
    return invalid_argument("--inject '" + text + "': unknown fault '" + kind + "'; " + kForm);
  }
  FaultSpec spec;
  spec.kind = *parsed;
  if (spec.kind == FaultKind::kPoint) {
    if (const std::string error = parse_point(text.substr(colon + 1), &spec); !error.empty()) {
      return invalid_argument("--inject '" + text + "': " + error);
    }
    return spec;
  }
  bool have_rank = false;
  bool have_factor = false;
  std::stringstream fields(text.substr(colon + 1));
  std::string field;
  while (std::getline(fields, field, ',')) {
    const auto eq = field.find('=');
    const std::string key = field.substr(0, eq);
    const std::string value = eq == std::string::npos ? "" : field.substr(eq + 1);
    if (const std::string error = parse_field(key, value, &spec, &have_rank); !error.empty()) {
      return invalid_argument("--inject '" + text + "': " + error);
    }
    have_factor = have_factor || key == "factor";
  }
  if (const std::string error = check_spec(spec, have_rank, have_factor); !error.empty()) {
    return invalid_argument("--inject '" + text + "' " + error);
  }
  return spec;
}

std::string describe_fault(const FaultSpec& spec) {
  if (spec.kind == FaultKind::kPoint) return "point " + spec.point;
  std::string text = std::string(fault_kind_name(spec.kind)) + ":rank=" + std::to_string(spec.rank);
  if (slows(spec.kind)) {
    char factor[32];
    std::snprintf(factor, sizeof(factor), "%g", spec.factor);
    text += std::string(",factor=") + factor;
  }
  if (spec.step) {
    text += ",at=" + std::to_string(*spec.step);
  } else if (spec.seconds) {
    char seconds[32];
    std::snprintf(seconds, sizeof(seconds), "%gs", *spec.seconds);
    text += std::string(",at=") + seconds;
  }
  if (spec.until) text += ",until=" + std::to_string(*spec.until);
  return text;
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

}  // namespace ntp::launch
