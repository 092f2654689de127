// Spawn and reap: the worker processes of `ntp launch` and their process groups.
//
// Contracts:
// * A worker runs in its own process group (pgid = its pid), so that a fault or a stop reaches
//   its children too, and dies with the launcher (PR_SET_PDEATHSIG). SIGINT, SIGTERM and SIGPIPE
//   are back to their defaults and no signal is blocked in it.
// * Once a worker is reaped its group is SIGKILLed (nothing it started outlives it) and kept in
//   ProcessGroups until its last member is reaped: the launcher is the child subreaper of the
//   orphans, so it reaps them itself and leaves not even a zombie to init.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <optional>
#include <string>
#include <vector>

namespace ntp::launch {

// The binary of this process ("ntp" as a worker command means it).
std::string self_exe();

// CPUs this process may run on (its affinity mask), at least 1.
int cpus_for_workers();

struct SpawnedWorker {
  pid_t pid = -1;
  int out_fd = -1;  // non-blocking read ends of the worker's stdout and stderr
  int err_fd = -1;
};

// Starts `argv` with the launcher's environment plus `env` ("NAME=value") in a process group of
// its own. On failure (pipes, fork) the error says why and nothing is left running; a program
// that cannot be executed exits 127 with a line on its stderr.
std::optional<SpawnedWorker> spawn_worker(std::vector<std::string> argv,
                                          std::vector<std::string> env, std::string* error);

// The exit code of `pid` (128 + signal when a signal ended it) if it has exited, without reaping
// it: the pid stays reserved (a zombie) until reap_worker, so a signal sent to its group in the
// meantime cannot reach a stranger that reused the number.
std::optional<int> exited_code(pid_t pid);

// Whether `pid` is stopped by a signal (SIGSTOP, SIGTSTP, ...) now; its state is left to wait for.
bool is_stopped(pid_t pid);

// Reaps an exited worker (after exited_code said so) and SIGKILLs what is left of its group.
void reap_worker(pid_t pid);

// The groups of reaped workers that may still have members.
class ProcessGroups {
 public:
  void add(pid_t group) { groups_.push_back(group); }
  // Reaps what is left of the groups (SIGKILLed, reparented to the launcher) and forgets a group
  // once it has no member; a member forked after the first SIGKILL gets one too.
  void reap();
  // Returns once every group is gone, or after `bound` (a member that is not the launcher's
  // descendant cannot be reaped here): then the groups left, which the caller reports.
  std::vector<pid_t> wait_all(std::chrono::milliseconds bound);
  bool empty() const { return groups_.empty(); }

 private:
  std::vector<pid_t> groups_;
};

}  // namespace ntp::launch
