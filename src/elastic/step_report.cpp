#include "elastic/step_report.h"

namespace ntp::elastic {

std::string step_key(int rank) { return "launch/step/" + std::to_string(rank); }

Status report_step(comm::Store& store, int rank, long long step) {
  return store.set(step_key(rank), std::to_string(step));
}

}  // namespace ntp::elastic
