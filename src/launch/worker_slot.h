// One device slot of `ntp launch` and the worker process that currently holds it: what the
// launcher's parts (spawn and reap, output relay, faults, replacement, summary) share.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <fstream>
#include <future>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "launch/identity.h"

namespace ntp::launch {

// kRunning: alive and expected to end by itself. kHung: alive but never ends by itself (an
// injected hang or stall, or stopped by a signal the launcher did not send): SIGKILLed once every
// other worker finished. kWaiting: gone, its replacement (replace_failed) is scheduled. kDone:
// gone.
enum class SlotState { kRunning, kHung, kWaiting, kDone };

// One output stream of one worker: a non-blocking pipe and the unfinished last line.
struct Stream {
  int fd = -1;
  std::string partial;
};

// A worker process the job lost, for the launcher's final summary.
struct LostWorker {
  int rank = 0;
  int restart_count = 0;
  int attempt = 0;
  std::string cause;  // "killed by --inject kill at step 4", "fenced out of the job", ...
  std::string ended;  // "exit code 137 (SIGKILL)", ...
};

struct Slot {
  WorkerIdentity id;
  pid_t pid = -1;
  SlotState state = SlotState::kDone;
  // Why the current worker is expected to die or hang (an injected fault), empty when it is not:
  // its exit does not count for the exit code.
  std::string injected;
  // kHung because a signal the launcher did not send stopped it (a fault point's `:stop`, an
  // operator's kill -STOP): kRunning again if it is continued.
  bool stopped = false;
  bool lost = false;        // failed under restart_on_failure: never started again
  int exit_code = 0;        // when done: exit code, or 128 + signal
  long long step = -1;      // last reported step
  int step_generation = 0;  // step resets asked for this slot (launch/store_channel.h)
  int replacements = 0;     // replace_failed: replacements started for this slot
  std::chrono::steady_clock::time_point replace_at;  // kWaiting: when to start the replacement
  std::optional<std::chrono::steady_clock::time_point> held_since;  // held for the store since
  std::future<bool> left_query;  // exited 0: did it report that it was fenced? (in flight)
  std::future<bool> probe;       // kWaiting: does the store answer? (in flight)
  Stream out;
  Stream err;
  std::unique_ptr<std::ofstream> log;
};

}  // namespace ntp::launch
