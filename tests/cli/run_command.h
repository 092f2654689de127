// Runs a program in a child process and captures what it printed, for end-to-end CLI tests.
#pragma once

#include <string>
#include <vector>

namespace ntp::testing {

struct CommandOutput {
  int exit_code = -1;  // -1 if the child did not exit normally
  std::string out;     // stdout
  std::string err;     // stderr
};

// Runs `argv[0]` with `argv` (no shell), waits for it, returns its exit code and output.
CommandOutput run_command(const std::vector<std::string>& argv);

}  // namespace ntp::testing
