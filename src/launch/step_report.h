// How workers talk back to their launcher through the store.
//
// * Steps (so faults can be placed at steps): "launch/step/<rank>" holds the last step the worker
//   started, in decimal. Written only by a worker the launcher started with NTP_REPORT_STEPS=1
//   (while a fault placed at a step is pending: steps_wanted), so a job without such faults has
//   no store I/O per step.
// * Leaving a job that goes on (so `ntp launch --replace-failed` replaces the worker):
//   "launch/left/<rank>" = the restart count (NTP_RESTART_COUNT) of the worker process that was
//   fenced out of the job (declared dead by the others, e.g. on the far side of a healed network
//   partition) and exits 0 without writing anything as a member. A worker that ends because the
//   job finished does not write it. The restart count names the process, so an old notice never
//   marks its replacement.
// * Finishing the job (so the launcher's exit code says the job trained all its steps even when
//   workers were lost on the way): "launch/finished/<rank>" = "<incarnation> <steps>", written by
//   a worker that took part in the job to its last step (incarnation: comm::incarnation of
//   NTP_ATTEMPT and NTP_RESTART_COUNT, so a notice of an earlier process never counts for a
//   later one).
#pragma once

#include <optional>
#include <string>

#include "comm/store.h"
#include "core/status.h"

namespace ntp::launch {

std::string step_key(int rank);
Status report_step(comm::Store& store, int rank, long long step);
// The environment variable that asks a worker for its step reports ("1"), the entry the launcher
// sets, and the worker's reading of it.
inline constexpr const char* kReportStepsVar = "NTP_REPORT_STEPS";
std::string report_steps_env();
bool steps_wanted();

std::string left_key(int rank);
Status report_left(comm::Store& store, int rank, int restart_count);
// Whether worker process `restart_count` of `rank` reported that it left. A store error counts as
// "no" (the launcher then treats the exit 0 as the end of the worker's work).
bool has_left(comm::Store& store, int rank, int restart_count);

std::string finished_key(int rank);
Status report_finished(comm::Store& store, int rank, const std::string& incarnation,
                       long long steps);
// The steps that worker process `incarnation` of `rank` reported when it finished the job; none
// when it did not report (or on a store error).
std::optional<long long> finished_steps(comm::Store& store, int rank,
                                        const std::string& incarnation);

}  // namespace ntp::launch
