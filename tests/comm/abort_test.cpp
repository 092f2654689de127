// Aborting blocked operations, with real processes and real signals and a 30 s communicator
// timeout, so that anything not ended by the abort would show up as a ~30 s failure:
//  - an operation blocked on a SIGSTOPped peer, running inline or on the progress thread, ends
//    with kUnavailable within milliseconds of an abort() from another thread;
//  - with an AbortWatch on a store key on every rank, one notice ends the running allreduce of
//    every survivor within a second of the fault (a stop announced by the test standing in for a
//    heartbeat detector, or a kill noticed by whichever survivor's connection broke first).
#include <gtest/gtest.h>
#include <signal.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "comm/abort_watch.h"
#include "comm/communicator.h"
#include "comm/gloo_communicator.h"
#include "comm/store.h"
#include "multiprocess.h"

namespace ntp::comm {
namespace {

using namespace testing;  // the multi-process harness of multiprocess.h

constexpr auto kTimeout = std::chrono::milliseconds(30000);

// Waits until `key` reaches `want` (an add counter), up to 20 s.
bool wait_count(Store& store, const std::string& key, std::int64_t want) {
  for (int i = 0; i < 4000; ++i) {
    Result<std::int64_t> v = store.add(key, 0);
    if (v.ok() && *v >= want) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return false;
}

// Starts the test's workers, SIGSTOPs or SIGKILLs `victim` once all `n` have added 1 to "ready"
// (and `delay` later), records the moment under "fault_at", runs `after_fault` and checks that
// every survivor exits 0 well before the communicator timeout.
void run_with_fault(int n, int victim, int signal, std::chrono::milliseconds delay,
                    const std::function<int(const std::string& dir, int rank)>& worker,
                    const std::function<void(Store&)>& after_fault) {
  TempDir dir;
  std::vector<pid_t> pids = spawn_ranks(n, [&](int r) { return worker(dir.path(), r); });
  std::shared_ptr<Store> store = *open_store("file:" + dir.path(), "abort");
  ASSERT_TRUE(wait_count(*store, "ready", n)) << "workers did not connect";
  std::this_thread::sleep_for(delay);
  const pid_t target = pids[static_cast<std::size_t>(victim)];
  ASSERT_EQ(kill(target, signal), 0);
  ASSERT_TRUE(store->set("fault_at", std::to_string(monotonic_ns())).ok());
  after_fault(*store);
  std::vector<pid_t> survivors;
  for (int r = 0; r < n; ++r) {
    if (r != victim) survivors.push_back(pids[static_cast<std::size_t>(r)]);
  }
  // Far below the 30 s timeout: a survivor still waiting then would be a failure of the abort.
  std::vector<testing::ChildExit> exits = wait_all(survivors, std::chrono::seconds(15));
  kill(target, SIGKILL);
  wait_all({target}, std::chrono::seconds(5));
  for (const auto& e : exits) {
    EXPECT_FALSE(e.timed_out) << "survivor pid " << e.pid << " still blocked after 15 s";
    EXPECT_TRUE(e.exited && e.code == 0)
        << "survivor pid " << e.pid << " code " << e.code << " signal " << e.signal;
  }
}

// The blocked operations of the first test, each on its own communicator (an abort breaks it).
struct BlockedOp {
  const char* name;
  std::function<Status(Communicator&)> run;
};

std::vector<BlockedOp> blocked_ops(int victim) {
  auto large = std::make_shared<std::vector<float>>(1 << 20, 1.0F);
  auto small = std::make_shared<std::vector<float>>(64, 1.0F);
  return {
      {"allreduce inline (ring)", [large](Communicator& c) { return c.allreduce(view(*large)); }},
      {"allreduce async (direct, progress thread)",
       [small](Communicator& c) {
         return c.allreduce_async(view(*small), ReduceOp::kSum)->wait();
       }},
      {"broadcast from the stopped rank",
       [large, victim](Communicator& c) { return c.broadcast(view(*large), victim); }},
      {"allgather",
       [large](Communicator& c) {
         std::vector<std::size_t> counts(static_cast<std::size_t>(c.size()), 1000);
         std::vector<float> in(1000, 1.0F);
         return c.allgather(const_view(in),
                            View{large->data(), counts.size() * 1000, DType::kFloat32}, counts);
       }},
      {"alltoallv",
       [large](Communicator& c) {
         std::vector<std::size_t> counts(static_cast<std::size_t>(c.size()), 4096);
         std::vector<float> in(counts.size() * 4096, 1.0F);
         return c.alltoallv(const_view(in), counts,
                            View{large->data(), counts.size() * 4096, DType::kFloat32}, counts);
       }},
      {"barrier", [](Communicator& c) { return c.barrier(); }},
      {"recv from the stopped rank",
       [small, victim](Communicator& c) { return c.recv(view(*small), victim, 7); }},
  };
}

TEST(AbortTest, AbortFromAnotherThreadEndsAnOperationBlockedOnAStoppedPeerAtOnce) {
  constexpr int n = 3;
  constexpr int victim = 2;
  constexpr auto kAbortAfter = std::chrono::milliseconds(300);
  const std::size_t cases = blocked_ops(victim).size();
  run_with_fault(
      n, victim, SIGSTOP, std::chrono::milliseconds(0),
      [&](const std::string& dir, int r) -> int {
        std::shared_ptr<Store> store = *open_store("file:" + dir, "abort");
        std::vector<std::unique_ptr<Communicator>> comms;
        for (std::size_t i = 0; i < cases; ++i) {
          Result<std::unique_ptr<Communicator>> c =
              connect_rank(store, r, n, "c" + std::to_string(i), kTimeout);
          CHILD_CHECK(c.ok(), r, c.status().to_string());
          comms.push_back(std::move(*c));
        }
        CHILD_CHECK(store->add("ready", 1).ok(), r, "ready");
        if (r == victim) {
          for (;;) std::this_thread::sleep_for(std::chrono::seconds(1));  // stopped, then killed
        }
        CHILD_CHECK(store->wait({"fault_at"}, std::chrono::seconds(20)).ok(), r, "fault_at");
        std::vector<BlockedOp> ops = blocked_ops(victim);
        for (std::size_t i = 0; i < ops.size(); ++i) {
          Communicator& c = *comms[i];
          std::atomic<long long> aborted_ns{0};
          const long long start_ns = monotonic_ns();
          std::thread aborter([&] {
            std::this_thread::sleep_for(kAbortAfter);
            aborted_ns.store(monotonic_ns());
            c.abort("test abort " + std::to_string(i));
          });
          Status s = ops[i].run(c);
          const long long failed_ns = monotonic_ns();
          aborter.join();
          const std::string what = std::string(ops[i].name) + ": ";
          CHILD_CHECK(s.code() == StatusCode::kUnavailable, r, what + s.to_string());
          // It was blocked until the abort (the other survivor aborts at about the same moment,
          // which may end this rank's operation a few ms earlier)...
          CHILD_CHECK(failed_ns - start_ns > 200'000'000LL, r, what + "did not block");
          // ...and ended within milliseconds of it, not at the 30 s timeout.
          const long long late_ms = (failed_ns - aborted_ns.load()) / 1'000'000;
          CHILD_CHECK(late_ms < 200, r,
                      what + "ended " + std::to_string(late_ms) + " ms after abort");
          std::fprintf(stderr, "rank %d: %s ended %.2f ms after the abort\n", r, ops[i].name,
                       static_cast<double>(failed_ns - aborted_ns.load()) / 1e6);
        }
        return 0;
      },
      [](Store&) {});
}

// Every survivor runs allreduces with an AbortWatch on "abort" (20 ms) that aborts its
// communicator; a survivor whose allreduce fails posts the notice itself. Returns 0 when this
// survivor's allreduce failed within 1 s of "fault_at".
int watched_worker(const std::string& dir, int r, int n, int victim) {
  std::shared_ptr<Store> store = *open_store("file:" + dir, "abort");
  Result<std::unique_ptr<Communicator>> comm = connect_rank(store, r, n, "world", kTimeout);
  CHILD_CHECK(comm.ok(), r, comm.status().to_string());
  Communicator& c = **comm;
  AbortWatch watch(store, "abort", std::chrono::milliseconds(20),
                   [&c](const std::string& reason) { c.abort(reason); });
  CHILD_CHECK(store->add("ready", 1).ok(), r, "ready");
  std::vector<float> data(1 << 16);
  Status status;
  long long iterations = 0;
  while (status.ok()) {
    for (std::size_t i = 0; i < data.size(); ++i) data[i] = static_cast<float>(r + 1);
    status = c.allreduce(view(data));
    if (status.ok()) {
      CHILD_CHECK(data[0] == static_cast<float>(n * (n + 1) / 2), r, "sum");
      ++iterations;
    }
  }
  const long long failed_ns = monotonic_ns();
  (void)victim;
  if (!watch.fired()) {
    // This rank found the fault itself: tell everyone.
    (void)post_abort(*store, "abort", "rank " + std::to_string(r) + ": " + status.message());
    (void)store->add("detectors", 1);
  }
  CHILD_CHECK(status.code() == StatusCode::kUnavailable, r, status.to_string());
  CHILD_CHECK(store->wait({"fault_at"}, std::chrono::seconds(5)).ok(), r, "fault_at");
  const long long latency_ms = (failed_ns - std::stoll(*store->get("fault_at"))) / 1'000'000;
  std::fprintf(stderr, "rank %d: %lld allreduces, failed %lld ms after the fault: %s\n", r,
               iterations, latency_ms, status.message().c_str());
  CHILD_CHECK(latency_ms < 1000, r, "failed " + std::to_string(latency_ms) + " ms after the fault");
  return 0;
}

// Five watched workers; `victim` gets `signal` 200 ms in, then `after_fault` runs.
void run_watched_with_fault(int victim, int signal,
                            const std::function<void(Store&)>& after_fault) {
  constexpr int n = 5;
  run_with_fault(
      n, victim, signal, std::chrono::milliseconds(200),
      [&](const std::string& dir, int r) { return watched_worker(dir, r, n, victim); },
      after_fault);
}

TEST(AbortWatchDetectionTest, EverySurvivorOfAStopFailsWithinOneSecond) {
  // A stopped process closes nothing, so no survivor can tell before its timeout; a heartbeat
  // detector would post the notice; the test does it in its place.
  run_watched_with_fault(3, SIGSTOP, [](Store& store) {
    ASSERT_TRUE(post_abort(store, "abort", "rank 3 stopped beating").ok());
  });
}

TEST(AbortWatchDetectionTest, EverySurvivorOfAKillFailsWithinOneSecond) {
  run_watched_with_fault(1, SIGKILL, [](Store&) {});
}

}  // namespace
}  // namespace ntp::comm
