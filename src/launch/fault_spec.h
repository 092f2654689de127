// Fault injection specs for `ntp launch` (tests and demos).
//
//   kill:rank=R,at=WHEN     SIGKILL worker R's process group
//   hang:rank=R,at=WHEN     SIGSTOP worker R's process group (it stays stopped until the end)
//   stall:rank=R,at=STEP    worker R's training thread blocks forever at the start of step STEP
//                           while its process and other threads go on (a deadlock, a stuck
//                           kernel); done inside the worker (NTP_STALL_AT, launch/stall.h)
//   slow:rank=R,factor=F,at=WHEN[,until=STEP]
//                           worker R runs at about F (0 < F <= 1) of its speed from WHEN until
//                           it reported step STEP (or to the end)
//   throttle:rank=R,factor=F,at=STEP[,until=STEP]
//                           worker R's compute runs at F (0 < F < 1] of its speed from step AT
//                           until step UNTIL (or to the end) while its communication does not
//                           slow down (a throttled GPU: kernels slower, links not); done inside
//                           the worker (NTP_THROTTLE, launch/throttle.h)
//   point:phase=PHASE,at=STEP|*,rank=R|ROLE[,action=kill|fail|stop]
//                           a fault point inside a worker (train/fault_point.h): every worker
//                           gets NTP_FAULT_POINT=PHASE:STEP:RANK[:ACTION], and the one whose rank
//                           (or role, e.g. decider@1) it names kills itself, fails the operation
//                           or stops itself at that phase of that step (`*`: any step)
//   repair:rank=R,at=WHEN   start a fresh worker for slot R if it is dead, hung or stalled (one
//                           that is alive is killed first); the new worker sees
//                           NTP_RESTART_COUNT > 0
// WHEN is a step ("at=12": once worker R reported step >= 12; for repair, once any live worker
// did) or seconds since launch ("at=2.5s"); a stall needs a step.
//
//   --chaos SEED,RATE       random kill/hang faults at RATE per second (Poisson, deterministic
//                           draws from ntp::Rng(SEED)), and slowdowns and stalls from streams of
//                           their own (launch/fault_injector.h); never the last live worker.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "core/status.h"

namespace ntp::launch {

enum class FaultKind { kKill, kHang, kStall, kSlow, kThrottle, kPoint, kRepair };

const char* fault_kind_name(FaultKind kind);

struct FaultSpec {
  FaultKind kind = FaultKind::kKill;
  int rank = 0;                    // global rank (NTP_RANK) of the slot
  std::optional<long long> step;   // fire at this step ...
  std::optional<double> seconds;   // ... or this many seconds after launch
  double factor = 1.0;             // slow, throttle: the share of its speed kept, in (0, 1]
  std::optional<long long> until;  // slow, throttle: the step at which it ends; none: the end
  // point: the NTP_FAULT_POINT item (rank is -1 when a role is named: any node's worker may hold
  // it).
  std::string point;
};

// Parses "kill:rank=R,at=WHEN" (see above). kInvalidArgument names the bad part and the fix.
Result<FaultSpec> parse_fault_spec(const std::string& text);

// The spec as the user writes it ("slow:rank=1,factor=0.5,at=4,until=9"), for messages.
std::string describe_fault(const FaultSpec& spec);

struct ChaosSpec {
  std::uint64_t seed = 0;
  double rate_per_second = 0.0;
};

// Parses "SEED,RATE" (RATE > 0, faults per second).
Result<ChaosSpec> parse_chaos_spec(const std::string& text);

}  // namespace ntp::launch
