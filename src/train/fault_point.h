// Fault points: test hooks that SIGKILL or SIGSTOP this worker (or fail its operation) at a chosen
// phase of a chosen step, so that tests can place a real process death or hang inside forward,
// backward, the gradient sync, the optimizer, a checkpoint save, a re-formation or its agreement
// (`ntp launch --inject` only fires between steps).
//
//   NTP_FAULT_POINT=PHASE:STEP:RANK[:ACTION][,PHASE:STEP:RANK[:ACTION]...]   (in the job's
//   environment; ACTION is fail, stop or together, none kills)
// Each target kills the worker whose NTP_RANK is RANK when it reaches PHASE while the trainer is at
// step STEP (a re-formation counts as the step it re-forms before; `*` is any step). RANK may also
// name a role the worker holds at that point (`decider@E`: it is epoch E's decider: its claim of
// the epoch came first).
// With `:fail` the worker instead fails its operation there, once, and lives on
// (fault_point_fails): the rollback test's split.
// With `:together` every rank named with the same PHASE:STEP and `together` dies there only once
// all of them have reached it (each writes a marker file into NTP_FAULT_DIR and waits, at most
// 30 s, for the others'): deaths that no survivor can see one at a time, which a plain kill cannot
// promise when some members are still finishing a collective the dying ones already left.
// With `:stop` the worker SIGSTOPs itself there, once: its whole process stops, heartbeat thread
// and failure watch included, so its peers take it as hung after --hang-detect-ms (a hang placed
// inside a phase). It stays stopped until someone sends SIGCONT (then it goes on from that point)
// or kills it; `ntp launch` kills a stopped worker once every other worker has finished.
// Phases of a step: forward, backward, sync (a bucket's reduction on the executor thread), wait,
// optimizer (after the step's world all-reduce, before the update), commit (after the update),
// checkpoint (a save started, not yet committed). Phases of a re-formation: admit (world rank 0
// writing a joiner's admission), decider_publish (the epoch's decider decided its member list
// and has not published it: only as the role `decider@E` or the decider's rank), reform_agreed
// (the member list received), reform_planned, reform_build (before the communicators'
// rendezvous), reform_reshard (before the state moves), reform_commit (before the reshard's
// totals are exchanged and the epoch marked done).
// Every kill or stop prints one line to stderr first, with its moment on the metrics' clock:
// "ntp fault point: SIGKILL in PHASE of step S[ as the ROLE] at UNIX_SECONDS" (SIGSTOP likewise).
// Without the variable a fault point costs one relaxed atomic load.
#pragma once

#include <cstdint>

namespace ntp::train {

// The step the trainer is in (fault points on other threads read it).
void set_fault_step(int64_t step);
// SIGKILLs (or, once per `:stop` target, SIGSTOPs) this process if NTP_FAULT_POINT names `phase`
// at the current step, for this worker's rank or for `role` when given.
void fault_point(const char* phase, const char* role = nullptr);
// True, once per target, if NTP_FAULT_POINT names `phase` at the current step with `:fail`.
bool fault_point_fails(const char* phase);

}  // namespace ntp::train
