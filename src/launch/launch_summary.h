// How `ntp launch` ends: its exit code and the summary lines, from what happened to the workers.
//
// The rule (docs/launch.md, "Exit code"):
// * The job finished — a worker of this node reported that it trained the job to its last step
//   (launch::report_finished) — : exit 0, whatever happened to the workers lost on the way.
// * Else the code of the first slot (local order) whose last worker failed and was not hit by an
//   injected fault (128 + signal when a signal ended it), as before finished reports existed.
// * Else, when the workers reported steps (the job is one that reports its progress) and workers
//   were lost but none reported the end: 1, the job did not finish.
// * Else 0 (workers that report nothing, e.g. `sh -c ...`, each exited 0 or were hit by a fault).
// Whenever a worker was lost or the code is not 0 the launcher prints why, and one line per lost
// worker: its rank, process (restart, attempt), what happened to it and how it ended.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "launch/worker_slot.h"

namespace ntp::launch {

// "exit code 3", "exit code 137 (SIGKILL)".
std::string describe_exit(int exit_code);

struct JobEnd {
  std::vector<LostWorker> lost;
  std::optional<int> finished_rank;  // a worker that reported the end of the job ...
  long long finished_steps = 0;      // ... and the steps it reported
  bool reported_steps = false;       // some worker reported a step
  bool store_answered = true;        // the end-of-job reports could be read
  std::optional<int> failed_rank;    // the first slot whose last worker counts as failed ...
  int failed_code = 0;               // ... and its code
};

// The exit code of a job that ran to its end (not stopped by a signal, not given up on).
int job_exit_code(const JobEnd& end);

// The summary lines for `end` and `code` (empty when there is nothing to say).
std::vector<std::string> summary_lines(const JobEnd& end, int code);

}  // namespace ntp::launch
