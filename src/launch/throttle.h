// The worker's half of `ntp launch --inject throttle:rank=R,factor=F,at=STEP[,until=STEP]`: the
// launcher sets NTP_THROTTLE=F,AT[,UNTIL] in the environment of rank R's worker only, and its
// training thread, after each piece of compute of a step in [AT, UNTIL), sleeps (1/F - 1) times
// that piece's duration. Its compute then runs at F of its speed while its communication keeps
// its pace: a GPU throttled for power or heat runs its kernels slower, not its links. (`slow:`,
// which duty-cycles the whole process, slows both.)
#pragma once

#include <cstdint>
#include <optional>

#include "launch/identity.h"

namespace ntp::launch {

struct Throttle {
  double factor = 1.0;  // the share of its compute speed the worker keeps, in (0, 1]
  int64_t at = 0;
  std::optional<int64_t> until;  // none: to the end
};

// NTP_THROTTLE as a throttle; none when unset. A value that does not parse is ignored (with a
// line on stderr): a typo must not slow anything.
std::optional<Throttle> throttle_from_env(const EnvLookup& env);

// The compute factor at `step` (1.0 outside the throttle or without one), from the process
// environment read once. Thread-safe.
double throttle_factor(int64_t step);

}  // namespace ntp::launch
