// Quick tests of Communicator::abort racing the running operation, and of AbortWatch (also run
// under ASan/UBSan): real processes, real Gloo connections, aborts from another thread at random
// moments (before an operation registers its buffers, while it waits, after it finished).
#include "comm/abort_watch.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "comm/communicator.h"
#include "comm/gloo_communicator.h"
#include "comm/store.h"
#include "core/rng.h"
#include "multiprocess.h"

namespace ntp::comm {
namespace {

using Clock = std::chrono::steady_clock;
using testing::spawn_ranks;
using testing::TempDir;
using testing::wait_all;

TEST(AbortWatchTest, FiresOnceWithThePostedReasonWithinAFewIntervals) {
  TempDir dir;
  std::shared_ptr<Store> store = *open_store("file:" + dir.path(), "watch");
  std::atomic<int> calls{0};
  std::atomic<long long> fired_ns{0};
  std::string seen;  // written by the watch thread before `calls` is incremented
  {
    AbortWatch watch(store, "e1/abort", std::chrono::milliseconds(10),
                     [&](const std::string& reason) {
                       seen = reason;
                       fired_ns.store(testing::monotonic_ns());
                       calls.fetch_add(1);
                     });
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    EXPECT_FALSE(watch.fired());
    EXPECT_EQ(calls.load(), 0);
    const long long posted_ns = testing::monotonic_ns();
    ASSERT_TRUE(post_abort(*store, "e1/abort", "rank 3: peer closed").ok());
    for (int i = 0; i < 200 && calls.load() == 0; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    ASSERT_EQ(calls.load(), 1);
    EXPECT_TRUE(watch.fired());
    EXPECT_EQ(seen, "rank 3: peer closed");
    // One interval plus scheduling on a loaded machine.
    EXPECT_LT(fired_ns.load() - posted_ns, 500'000'000LL);
    ASSERT_TRUE(post_abort(*store, "e1/abort", "again").ok());
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  EXPECT_EQ(calls.load(), 1);
}

TEST(AbortWatchTest, DestructorDoesNotWaitForTheInterval) {
  TempDir dir;
  std::shared_ptr<Store> store = *open_store("file:" + dir.path(), "watch");
  auto watch = std::make_unique<AbortWatch>(store, "never", std::chrono::seconds(30),
                                            [](const std::string&) { ADD_FAILURE(); });
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  const auto start = Clock::now();
  watch.reset();
  EXPECT_LT(Clock::now() - start, std::chrono::milliseconds(500));
}

// One round: every rank runs a stream of operations (inline and async, small and large) and
// aborts its communicator from another thread after a random delay. Whatever the moment, the
// running operation must end promptly with kUnavailable (or OK if it finished first), every
// operation after it must fail at once, and nothing may hang or touch freed memory.
int abort_round(const std::string& dir, int r, int n, int round) {
  std::shared_ptr<Store> store = *open_store("file:" + dir, "race");
  GlooOptions options;
  options.store = store;
  options.rank = r;
  options.size = n;
  options.prefix = "round" + std::to_string(round);
  options.timeout = std::chrono::milliseconds(10000);
  Result<std::unique_ptr<Communicator>> comm = connect_gloo(options);
  CHILD_CHECK(comm.ok(), r, comm.status().to_string());
  Communicator& c = **comm;
  CHILD_CHECK(c.barrier().ok(), r, "barrier");

  Rng rng(static_cast<std::uint64_t>(round * 131 + r));
  const auto delay = std::chrono::microseconds(rng.below(30000));
  std::atomic<long long> aborted_ns{0};
  std::thread aborter([&] {
    std::this_thread::sleep_for(delay);
    aborted_ns.store(testing::monotonic_ns());
    c.abort("round " + std::to_string(round));
  });
  std::vector<float> small(100, 1.0F);
  std::vector<float> large(1 << 18, 1.0F);
  std::vector<float> gathered(static_cast<std::size_t>(n) * 100);
  Status status;
  long long failed_ns = 0;
  for (int i = 0; status.ok(); ++i) {
    switch (i % 5) {
      case 0:
        status = c.allreduce(view(small));
        break;
      case 1:
        status = c.allreduce(view(large));
        break;
      case 2:
        status = c.allreduce_async(view(large), ReduceOp::kSum)->wait();
        break;
      case 3:
        status = c.allgather(const_view(small), view(gathered),
                             std::vector<std::size_t>(static_cast<std::size_t>(n), 100));
        break;
      default:
        status = c.barrier();
        break;
    }
    failed_ns = testing::monotonic_ns();
  }
  aborter.join();
  CHILD_CHECK(status.code() == StatusCode::kUnavailable, r,
              "want UNAVAILABLE: " + status.to_string());
  // A peer's abort may end this rank's operation first ("connection closed"); either way it ends
  // within a fraction of the 10 s timeout after this rank's own abort.
  const long long late_ms = (failed_ns - aborted_ns.load()) / 1'000'000;
  CHILD_CHECK(late_ms < 1000, r, "failed " + std::to_string(late_ms) + " ms after the abort");
  CHILD_CHECK(c.health().code() == StatusCode::kUnavailable, r, "sticky health");
  const auto start = Clock::now();
  CHILD_CHECK(c.allreduce(view(large)).code() == StatusCode::kUnavailable, r, "later op fails");
  CHILD_CHECK(c.barrier_async()->wait().code() == StatusCode::kUnavailable, r, "later async");
  CHILD_CHECK(Clock::now() - start < std::chrono::milliseconds(100), r, "later ops fail at once");
  return 0;
}

TEST(AbortRaceTest, AbortAtRandomMomentsEndsTheRunningOperationPromptly) {
  TempDir dir;
  constexpr int kRounds = 6;
  for (int round = 0; round < kRounds; ++round) {
    const int n = 2 + round % 2;
    std::vector<pid_t> pids =
        spawn_ranks(n, [&](int r) { return abort_round(dir.path(), r, n, round); });
    for (const auto& e : wait_all(pids, std::chrono::seconds(30))) {
      EXPECT_FALSE(e.timed_out) << "round " << round << ": a rank hung";
      EXPECT_TRUE(e.exited && e.code == 0)
          << "round " << round << ": code " << e.code << " signal " << e.signal;
    }
    if (HasFailure()) break;
  }
}

}  // namespace
}  // namespace ntp::comm
