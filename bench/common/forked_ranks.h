// Benches that run their ranks as forked processes: connecting them, waiting for them.
#pragma once

#include <sys/types.h>
#include <sys/wait.h>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "comm/gloo_communicator.h"
#include "comm/store.h"

namespace ntp::bench {

// Rank `rank` of `size` on ntp's Gloo communicator, meeting the others through a file store in
// `dir` (a bench's own temporary directory), with a timeout far above any bench's operation.
inline Result<std::unique_ptr<comm::Communicator>> connect_rank(const std::string& dir,
                                                                const std::string& run, int rank,
                                                                int size) {
  NTP_ASSIGN_OR_RETURN(std::shared_ptr<comm::Store> store, comm::open_store("file:" + dir, run));
  comm::GlooOptions options;
  options.store = std::move(store);
  options.rank = rank;
  options.size = size;
  options.timeout = std::chrono::milliseconds(120000);
  return comm::connect_gloo(options);
}

// Waits for every child in `pids`; returns how many did not exit with status 0.
inline int wait_for_ranks(const std::vector<pid_t>& pids) {
  int failed = 0;
  for (pid_t pid : pids) {
    int status = 0;
    waitpid(pid, &status, 0);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) ++failed;
  }
  return failed;
}

}  // namespace ntp::bench
