// The control-plane benches run each member count in a child process of its own (fresh
// descriptors, threads and servers; a run that hangs cannot hold the next count back).
#pragma once

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <thread>

namespace ntp::bench {

enum class ChildEnd { kOk, kFailed, kKilled };

// Forks; the child runs `body`, which ends the process itself (it prints its figures and leaves
// without tearing down). The parent waits up to `max_s`, then SIGKILLs and reaps it: kKilled.
template <typename Body>
ChildEnd run_child(double max_s, Body body) {
  std::fflush(stdout);
  const pid_t child = fork();
  if (child == 0) {
    body();
    _exit(1);  // (body does not return)
  }
  const auto start = std::chrono::steady_clock::now();
  int status = 0;
  while (waitpid(child, &status, WNOHANG) == 0) {
    if (std::chrono::steady_clock::now() - start > std::chrono::duration<double>(max_s)) {
      kill(child, SIGKILL);
      waitpid(child, &status, 0);
      return ChildEnd::kKilled;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return WIFEXITED(status) && WEXITSTATUS(status) == 0 ? ChildEnd::kOk : ChildEnd::kFailed;
}

}  // namespace ntp::bench
