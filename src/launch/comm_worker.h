// The demo/test worker behind `ntp comm-worker`: runs `steps` allreduce steps among the workers
// of an `ntp launch` job, reports each step to the launcher, and survives faults.
//
// Every step, rank r of the current group contributes small integers that depend only on
// (NTP_RANK, step, index), so the exact sum over the current members is known and checked.
// On kUnavailable the survivors agree on the members (comm/survivors.h, heartbeats), rebuild a
// communicator with a new epoch and redo the step. A worker started by `repair:` (restart count
// > 0) asks to join; the group's rank 0 admits it at the next step and everyone rebuilds with
// it, so a job can go N -> N-1 -> N without a restart.
//
// Output (stdout): one line per rebuild and "rank R: finished S steps, epoch E, members [...]"
// at the end. Exit 0 on success, 1 when a check failed or fewer than min_world remain, 3 when
// this worker was left out of the group.
#pragma once

#include <chrono>
#include <cstddef>

namespace ntp::launch {

struct CommWorkerOptions {
  long long steps = 20;
  std::size_t elements = 1 << 14;
  std::chrono::milliseconds timeout{2000};  // communicator timeout
  std::chrono::milliseconds step_time{20};  // pause between steps (simulated compute)
  int min_world = 1;
};

int run_comm_worker(const CommWorkerOptions& options);

}  // namespace ntp::launch
