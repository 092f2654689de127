// How workers talk back to their launcher through the store.
//
// * Steps (so faults can be placed at steps): "launch/step/<rank>" holds the last step the worker
//   started, in decimal.
// * Leaving a job that goes on (so `ntp launch --replace-failed` replaces the worker):
//   "launch/left/<rank>" = the restart count (NTP_RESTART_COUNT) of the worker process that was
//   fenced out of the job (declared dead by the others, e.g. on the far side of a healed network
//   partition) and exits 0 without writing anything as a member. A worker that ends because the
//   job finished does not write it. The restart count names the process, so an old notice never
//   marks its replacement.
#pragma once

#include <string>

#include "comm/store.h"
#include "core/status.h"

namespace ntp::elastic {

std::string step_key(int rank);
Status report_step(comm::Store& store, int rank, long long step);

std::string left_key(int rank);
Status report_left(comm::Store& store, int rank, int restart_count);
// Whether worker process `restart_count` of `rank` reported that it left. A store error counts as
// "no" (the launcher then treats the exit 0 as the end of the worker's work).
bool has_left(comm::Store& store, int rank, int restart_count);

}  // namespace ntp::elastic
