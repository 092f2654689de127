// Fault injection specs for `ntp launch` (tests and demos).
//
//   kill:rank=R,at=WHEN     SIGKILL worker R's process group
//   hang:rank=R,at=WHEN     SIGSTOP worker R's process group (it stays stopped until the end)
//   repair:rank=R,at=WHEN   start a fresh worker for slot R if it is dead or hung (a hung one is
//                           killed first); the new worker sees NTP_RESTART_COUNT > 0
// WHEN is a step ("at=12": once worker R reported step >= 12; for repair, once any live worker
// did) or seconds since launch ("at=2.5s").
//
//   --chaos SEED,RATE       random kill/hang faults at RATE per second (Poisson, deterministic
//                           draws from ntp::Rng(SEED)); never the last live worker.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "core/status.h"

namespace ntp::elastic {

enum class FaultKind { kKill, kHang, kRepair };

const char* fault_kind_name(FaultKind kind);

struct FaultSpec {
  FaultKind kind = FaultKind::kKill;
  int rank = 0;                   // global rank (NTP_RANK) of the slot
  std::optional<long long> step;  // fire at this step ...
  std::optional<double> seconds;  // ... or this many seconds after launch
};

// Parses "kill:rank=R,at=WHEN" (see above). kInvalidArgument names the bad part and the fix.
Result<FaultSpec> parse_fault_spec(const std::string& text);

struct ChaosSpec {
  std::uint64_t seed = 0;
  double rate_per_second = 0.0;
};

// Parses "SEED,RATE" (RATE > 0, faults per second).
Result<ChaosSpec> parse_chaos_spec(const std::string& text);

}  // namespace ntp::elastic
