// Exit notices: how `ntp launch` tells a running job that a worker process is gone, sooner than
// a heartbeat going stale can (a dead process's heartbeat is only "stale" after a second or so;
// the launcher knows the moment it reaps the process).
//
// When the launcher reaps a worker that exited with an error or was killed by a signal (and the
// launcher is not stopping the job itself), it writes
//   "launch/exit/<rank>" = the incarnation that exited ("<attempt>.<restart_count>")
// and then appends "exit <rank> <incarnation>" to the event stream "launch/events"
// (comm/stream.h), which every failure watch blocks on: the notice reaches every worker in one
// round trip, and no watcher reads any other rank's key to learn of it.
// A repaired slot runs a newer incarnation, so an old notice never marks its replacement dead.
#pragma once

#include <optional>
#include <string>

#include "comm/store.h"
#include "core/status.h"

namespace ntp::comm {

// "<attempt>.<restart_count>": one worker process of a slot (NTP_ATTEMPT, NTP_RESTART_COUNT).
std::string incarnation(int attempt, int restart_count);

// Written by the launcher after reaping `rank`'s worker process `who`.
Status post_exit_notice(Store& store, int rank, const std::string& who);

inline constexpr const char* kLaunchEvents = "launch/events";

// The key of `rank`'s notice (its value: the incarnation that exited).
std::string exit_notice_key(int rank);

// An event of kLaunchEvents; nullopt for any other kind of event.
struct ExitEvent {
  int rank = -1;
  std::string who;  // the incarnation
};
std::optional<ExitEvent> parse_exit_event(const std::string& event);

}  // namespace ntp::comm
