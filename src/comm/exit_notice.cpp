#include "comm/exit_notice.h"

#include <cstdlib>

namespace ntp::comm {

std::string exit_notice_key(int rank) { return "launch/exit/" + std::to_string(rank); }

std::string incarnation(int attempt, int restart_count) {
  return std::to_string(attempt) + "." + std::to_string(restart_count);
}

Status post_exit_notice(Store& store, int rank, const std::string& who) {
  // The notice first, then the event: a watcher woken by the event finds the notice.
  NTP_RETURN_IF_ERROR(store.set(exit_notice_key(rank), who));
  return store.append(kLaunchEvents, "exit " + std::to_string(rank) + " " + who);
}

std::optional<ExitEvent> parse_exit_event(const std::string& event) {
  if (event.rfind("exit ", 0) != 0) return std::nullopt;
  const auto space = event.find(' ', 5);
  if (space == std::string::npos) return std::nullopt;
  char* end = nullptr;
  const long rank = std::strtol(event.c_str() + 5, &end, 10);
  if (end != event.c_str() + space || rank < 0) return std::nullopt;
  return ExitEvent{static_cast<int>(rank), event.substr(space + 1)};
}

}  // namespace ntp::comm
