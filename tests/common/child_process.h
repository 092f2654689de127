// Runs a program in a child process and captures what it prints, for end-to-end tests of the
// `ntp` binary. Real processes: the tests may signal them while they run.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <string>
#include <vector>

namespace ntp::testing {

struct ChildProcess {
  pid_t pid = -1;
  int out_fd = -1;  // read end of the child's stdout
  int err_fd = -1;  // read end of the child's stderr
};

struct CommandOutput {
  int exit_code = -1;      // exit status, or 128 + signal number if a signal ended the child
  std::string out;         // stdout
  std::string err;         // stderr
  bool timed_out = false;  // the child was SIGKILLed for running past the limit
};

// Starts argv[0] with `argv` (no shell), its environment extended by `env` ("NAME=value").
ChildProcess start_child(const std::vector<std::string>& argv,
                         const std::vector<std::string>& env = {});

// Reads the child's output until both pipes close, then reaps it. Past `limit` the child is
// SIGKILLed and timed_out is set.
CommandOutput finish_child(const ChildProcess& child, std::chrono::milliseconds limit);

// start_child + finish_child.
CommandOutput run_command(const std::vector<std::string>& argv,
                          const std::vector<std::string>& env = {},
                          std::chrono::milliseconds limit = std::chrono::seconds(60));

}  // namespace ntp::testing
