#include "multiprocess.h"

#include <signal.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <thread>

#include "comm/gloo_communicator.h"

namespace ntp::comm::testing {

std::vector<pid_t> spawn_ranks(int n, const std::function<int(int rank)>& body) {
  std::vector<pid_t> pids;
  std::fflush(nullptr);
  for (int r = 0; r < n; ++r) {
    const pid_t pid = fork();
    if (pid == 0) {
      int code = 1;
      try {
        code = body(r);
      } catch (const std::exception& e) {
        std::fprintf(stderr, "rank %d: exception: %s\n", r, e.what());
      }
      std::fflush(nullptr);
      _exit(code);
    }
    if (pid < 0) std::abort();
    pids.push_back(pid);
  }
  return pids;
}

std::vector<ChildExit> wait_all(const std::vector<pid_t>& pids,
                                std::chrono::milliseconds deadline) {
  const auto end = std::chrono::steady_clock::now() + deadline;
  std::vector<ChildExit> result(pids.size());
  std::size_t remaining = pids.size();
  for (std::size_t i = 0; i < pids.size(); ++i) result[i].pid = pids[i];
  std::vector<bool> reaped(pids.size(), false);
  while (remaining > 0) {
    for (std::size_t i = 0; i < pids.size(); ++i) {
      if (reaped[i]) continue;
      int status = 0;
      const pid_t got = waitpid(pids[i], &status, WNOHANG);
      if (got == pids[i]) {
        reaped[i] = true;
        --remaining;
        result[i].exited = WIFEXITED(status);
        result[i].code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
        result[i].signal = WIFSIGNALED(status) ? WTERMSIG(status) : 0;
      }
    }
    if (remaining == 0) break;
    if (std::chrono::steady_clock::now() >= end) {
      for (std::size_t i = 0; i < pids.size(); ++i) {
        if (reaped[i]) continue;
        kill(pids[i], SIGKILL);
        int status = 0;
        waitpid(pids[i], &status, 0);
        result[i].timed_out = true;
        result[i].signal = SIGKILL;
      }
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  return result;
}

GlooOptions rank_options(std::shared_ptr<Store> store, int rank, int n, const std::string& prefix,
                         std::chrono::milliseconds timeout, int full_mesh_max_size) {
  return {.store = std::move(store),
          .rank = rank,
          .size = n,
          .prefix = prefix,
          .timeout = timeout,
          .full_mesh_max_size = full_mesh_max_size};
}

Result<std::unique_ptr<Communicator>> connect_rank(std::shared_ptr<Store> store, int rank, int n,
                                                   const std::string& prefix,
                                                   std::chrono::milliseconds timeout) {
  return connect_gloo(rank_options(std::move(store), rank, n, prefix, timeout));
}

long long monotonic_ns() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<long long>(ts.tv_sec) * 1000000000LL + ts.tv_nsec;
}

bool child_check(bool ok, int rank, const std::string& what) {
  if (!ok) std::fprintf(stderr, "rank %d: check failed: %s\n", rank, what.c_str());
  return ok;
}

int child_failure(int rank, const Status& status, int exit_code) {
  std::fprintf(stderr, "rank %d: %s\n", rank, status.to_string().c_str());
  return exit_code;
}

}  // namespace ntp::comm::testing
