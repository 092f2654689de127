// Exit notices: how `ntp launch` tells a running job that a worker process is gone, sooner than
// a heartbeat going stale can (a dead process's heartbeat is only "stale" after a second or so;
// the launcher knows the moment it reaps the process).
//
// When the launcher reaps a worker that exited with an error or was killed by a signal (and the
// launcher is not stopping the job itself), it writes
//   "launch/exit/<rank>" = the incarnation that exited ("<attempt>.<restart_count>")
// and then adds 1 to "launch/exits", a single counter a watcher can poll to learn of any exit.
// A repaired slot runs a newer incarnation, so an old notice never marks its replacement dead.
#pragma once

#include <cstdint>
#include <string>

#include "comm/store.h"
#include "core/status.h"

namespace ntp::comm {

// "<attempt>.<restart_count>": one worker process of a slot (NTP_ATTEMPT, NTP_RESTART_COUNT).
std::string incarnation(int attempt, int restart_count);

// Written by the launcher after reaping `rank`'s worker process `who`.
Status post_exit_notice(Store& store, int rank, const std::string& who);

// Whether the launcher reported that incarnation `who` of `rank` has exited. A store error
// counts as "no notice" (the caller falls back to heartbeats and timeouts).
bool has_exited(Store& store, int rank, const std::string& who);

// The number of exit notices posted so far in this run (0 when none or on a store error).
std::int64_t exit_notice_count(Store& store);

}  // namespace ntp::comm
