#include "launch/step_report.h"

#include <cstdlib>

namespace ntp::launch {

std::string step_key(int rank) { return "launch/step/" + std::to_string(rank); }

Status report_step(comm::Store& store, int rank, long long step) {
  return store.set(step_key(rank), std::to_string(step));
}

std::string report_steps_env() { return std::string(kReportStepsVar) + "=1"; }

bool steps_wanted() {
  const char* value = std::getenv(kReportStepsVar);
  return value != nullptr && std::string(value) == "1";
}

std::string left_key(int rank) { return "launch/left/" + std::to_string(rank); }

Status report_left(comm::Store& store, int rank, int restart_count) {
  return store.set(left_key(rank), std::to_string(restart_count));
}

bool has_left(comm::Store& store, int rank, int restart_count) {
  Result<std::string> value = store.get(left_key(rank));
  return value.ok() && *value == std::to_string(restart_count);
}

std::string finished_key(int rank) { return "launch/finished/" + std::to_string(rank); }

Status report_finished(comm::Store& store, int rank, const std::string& incarnation,
                       long long steps) {
  return store.set(finished_key(rank), incarnation + " " + std::to_string(steps));
}

std::optional<long long> finished_steps(comm::Store& store, int rank,
                                        const std::string& incarnation) {
  Result<std::string> value = store.get(finished_key(rank));
  if (!value.ok() || value->rfind(incarnation + " ", 0) != 0) return std::nullopt;
  try {
    return std::stoll(value->substr(incarnation.size() + 1));
  } catch (const std::exception&) {
    return std::nullopt;
  }
}

}  // namespace ntp::launch
