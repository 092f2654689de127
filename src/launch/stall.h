// The worker's half of `ntp launch --inject stall:rank=R,at=STEP`: the launcher sets
// NTP_STALL_AT=STEP in the environment of rank R's worker only, and the worker calls
// stall_if_asked(step) at the start of every step of its training thread (`ntp train` does, from
// its step callback). At step STEP the calling thread blocks forever (a sleep loop) while the
// process and its other threads (heartbeat, failure watch, progress) go on running: the "NCCL
// hang" of a deadlock or a stuck kernel, which only a progress-carrying heartbeat reveals.
// Nothing is stopped by a signal; the launcher kills the stalled worker once the others finished.
#pragma once

#include <cstdint>
#include <optional>

#include "launch/identity.h"

namespace ntp::launch {

// NTP_STALL_AT as a step; none when unset. A value that is not a step >= 0 is ignored (with a
// line on stderr): a typo must not stall anything.
std::optional<int64_t> stall_step_from_env(const EnvLookup& env);

// Blocks the calling thread forever when `step` >= NTP_STALL_AT (read from the process
// environment once, at the first call); returns at once otherwise. Thread-safe.
void stall_if_asked(int64_t step);

}  // namespace ntp::launch
