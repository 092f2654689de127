// Fault points: test hooks that SIGKILL this worker at a chosen phase of a chosen step, so that
// tests can place a real process death inside forward, backward, the gradient sync, the optimizer
// or a checkpoint save (`ntp launch --inject` only fires between steps).
//
//   NTP_FAULT_POINT=PHASE:STEP:RANK   (in the job's environment) kills the worker whose NTP_RANK
//                                      is RANK when it reaches PHASE of step STEP.
// Phases: forward, backward, sync (a bucket's reduction on the executor thread), wait,
// optimizer (after the step's world all-reduce, before the update), commit (after the update),
// checkpoint (a save started, not yet committed). Without the variable a fault point costs one
// relaxed atomic load.
#pragma once

#include <cstdint>

namespace ntp::train {

// The step the trainer is in (fault points on other threads read it).
void set_fault_step(int64_t step);
// SIGKILLs this process if NTP_FAULT_POINT names `phase` at the current step.
void fault_point(const char* phase);

}  // namespace ntp::train
