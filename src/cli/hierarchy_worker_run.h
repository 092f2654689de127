// The worker behind the hidden `ntp hierarchy-worker`: one member of the control plane's domain
// hierarchy (elastic/hierarchy_runtime.h) and nothing else, started by `ntp launch --domain-size`
// over the launcher's stores: the job's store is the leaders' global one, its domain's store
// (NTP_DOMAIN_STORE) the domain's. It runs the recovery protocol of a job of that shape without
// training, so that a launcher's faults (kill, hang) exercise the real protocol end to end, the
// launcher's exit notices on the domain stores included.
//
// What it does: waits until every worker of the job beats (a store count), arms its watches,
// reports a step every `step_time` (so that `--inject kill:rank=R,at=STEP` lands), and prints
//   "reformed N: epoch E, members [..], verdict: REASON"
// once per re-formation it trains again after (REASON: why its domain's watch fired, "" when its
// domain re-formed for another's sake). After its steps it waits for every member of the list it
// trains on to finish (a store count, at most 10 s), so that no member takes another's end as a
// hang, reports the job finished to its launcher (launch::report_finished), prints
// "finished S steps, epoch E, members [..]" and exits 0; 2 when a step of the
// protocol failed, 3 when it was declared dead, 4 when the job never started.
#pragma once

#include <chrono>

namespace ntp::cli {

struct HierarchyWorkerOptions {
  long long steps = 100;
  std::chrono::milliseconds step_time{20};
  std::chrono::milliseconds hang_detect{1000};         // the domain's watch and agreement
  std::chrono::milliseconds global_hang_detect{3000};  // the leaders'
};

int run_hierarchy_worker(const HierarchyWorkerOptions& options);

}  // namespace ntp::cli
