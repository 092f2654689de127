// Test helpers that run real worker processes (fork) and collect how they ended.
//
// Children must not use GoogleTest assertions (the parent owns the test); they report failures
// on stderr and through their exit code, which the parent asserts on. Communicators are created
// in the children after fork, never inherited.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "comm/gloo_communicator.h"
#include "comm/store.h"
#include "core/status.h"
#include "text_files.h"

namespace ntp::comm::testing {

struct ChildExit {
  pid_t pid = -1;
  bool exited = false;  // false: killed by a signal (or still running at the deadline)
  int code = -1;        // exit code when exited
  int signal = 0;       // terminating signal otherwise
  bool timed_out = false;
};

// Forks one child per rank; child r runs body(r) and exits with its return value (via _exit, so
// no parent state such as gtest's is flushed twice).
std::vector<pid_t> spawn_ranks(int n, const std::function<int(int rank)>& body);

// Waits for `pids` until `deadline`; children still alive then are SIGKILLed, reaped and marked
// timed_out (a hang). The result is in the order of `pids`.
std::vector<ChildExit> wait_all(const std::vector<pid_t>& pids, std::chrono::milliseconds deadline);

// The options of rank `rank` of `n` over `store`, its keys under `prefix`, whose operations fail
// with kUnavailable after `timeout`; a group of more than `full_mesh_max_size` members is sparse.
GlooOptions rank_options(std::shared_ptr<Store> store, int rank, int n, const std::string& prefix,
                         std::chrono::milliseconds timeout,
                         int full_mesh_max_size = GlooOptions{}.full_mesh_max_size);

// Inside a child: a Gloo communicator of rank_options(store, rank, n, prefix, timeout).
Result<std::unique_ptr<Communicator>> connect_rank(std::shared_ptr<Store> store, int rank, int n,
                                                   const std::string& prefix,
                                                   std::chrono::milliseconds timeout);

// A fresh empty directory $TMPDIR/ntp-comm-test-XXXXXX, removed by the destructor.
class TempDir : public ntp::testing::TempDir {
 public:
  TempDir() : ntp::testing::TempDir("ntp-comm-test") {}
};

// Monotonic clock in nanoseconds, comparable between processes of one machine.
long long monotonic_ns();

// Reports a failed check from a child: prints "rank R: what" and returns false.
bool child_check(bool ok, int rank, const std::string& what);

// Reports a failed step of a child: prints "rank R: <status>" and returns `exit_code` (the
// child's exit code, which names the step to the parent).
int child_failure(int rank, const Status& status, int exit_code);

}  // namespace ntp::comm::testing

// Inside a child's body: on failure print and return exit code 1.
#define CHILD_CHECK(cond, rank, what)                                         \
  do {                                                                        \
    if (!::ntp::comm::testing::child_check((cond), (rank), (what))) return 1; \
  } while (false)
