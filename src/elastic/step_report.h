// How workers tell the launcher their training step (so faults can be placed at steps): the
// store key "launch/step/<rank>" holds the last step the worker started, in decimal.
#pragma once

#include <string>

#include "comm/store.h"
#include "core/status.h"

namespace ntp::elastic {

std::string step_key(int rank);
Status report_step(comm::Store& store, int rank, long long step);

}  // namespace ntp::elastic
