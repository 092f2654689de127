// Progress tokens: the fields a watcher reads (elastic/progress.h), old and new forms, and the
// starvation rule on the training thread's CPU clock.
#include "elastic/progress.h"

#include <gtest/gtest.h>

#include <chrono>
#include <thread>

namespace ntp::elastic {
namespace {

using std::chrono::milliseconds;

TEST(ProgressTokenTest, TheFiveFieldsParse) {
  const ProgressToken t = parse_progress("s.4|0.12:2:9:0:1");
  EXPECT_EQ(t.beat, "s.4");
  EXPECT_EQ(t.moving, "0.12");
  EXPECT_EQ(t.phase, Phase::kStep);
  EXPECT_FALSE(t.waiting);
  EXPECT_TRUE(t.starved);
  const ProgressToken w = parse_progress("s.5|0.12:2:9:1:0");
  EXPECT_TRUE(w.waiting);
  EXPECT_FALSE(w.starved);
}

TEST(ProgressTokenTest, TheFourFieldFormOfEarlierWorkersParsesAsNotStarved) {
  const ProgressToken t = parse_progress("s.4|0.12:2:9:1");
  EXPECT_TRUE(t.waiting);
  EXPECT_FALSE(t.starved);
  EXPECT_FALSE(parse_progress("s.4|0.12:2:9:0").waiting);
}

TEST(ProgressTokenTest, StarvedMeansRanForOnePercentToUnderHalfOfTheInterval) {
  constexpr std::int64_t kWall = 100'000'000;      // 100 ms
  EXPECT_FALSE(starved_share(kWall, 0));           // blocked: stuck, not starved
  EXPECT_FALSE(starved_share(kWall, 999'999));     // just under 1%: a sleeping loop's wake-ups
  EXPECT_TRUE(starved_share(kWall, 1'000'000));    // 1%
  EXPECT_TRUE(starved_share(kWall, 49'999'999));   // just under half
  EXPECT_FALSE(starved_share(kWall, 50'000'000));  // half or more: computing at speed
  EXPECT_FALSE(starved_share(0, 0));
}

TEST(ProgressTokenTest, AStarvedTokenGetsTheLongAllowanceAndAWaitingOneNone) {
  Stillness stillness(milliseconds(100));
  const auto t0 = Stillness::Clock::now();
  // Beats move, progress stands at 0.7; starved: still only after 10 x 100 ms.
  EXPECT_FALSE(stillness.still(5, "a.1|0.7:2:9:0:1", t0));
  EXPECT_FALSE(stillness.still(5, "a.2|0.7:2:9:0:1", t0 + milliseconds(90)));
  EXPECT_FALSE(stillness.still(5, "a.3|0.7:2:9:0:1", t0 + milliseconds(999)));
  EXPECT_TRUE(stillness.still(5, "a.4|0.7:2:9:0:1", t0 + milliseconds(1000)));
  // The same progress not starved: still after the step's 100 ms.
  EXPECT_FALSE(stillness.still(6, "b.1|0.7:2:9:0:0", t0));
  EXPECT_TRUE(stillness.still(6, "b.2|0.7:2:9:0:0", t0 + milliseconds(100)));
  // Waiting on its peers: never still by its progress, starved or not.
  EXPECT_FALSE(stillness.still(7, "c.1|0.7:2:9:1:0", t0));
  EXPECT_FALSE(stillness.still(7, "c.2|0.7:2:9:1:0", t0 + milliseconds(5000)));
}

// The training thread's own clock, on real threads: a blocked thread is not starved; one that
// runs 10% of the time is. (A thread at full speed is the rule's other side, tested above without
// a clock: on a loaded host a spinning thread may itself get under half a core.)
TEST(ProgressTokenTest, TheCpuClockTellsABlockedThreadFromAStarvedOne) {
  std::atomic<bool> stop{false};
  std::atomic<clockid_t> blocked_clock{}, duty_clock{};
  std::atomic<int> ready{0};
  std::thread blocked([&] {
    blocked_clock = Progress::this_thread_cpu_clock();
    ready.fetch_add(1);
    while (!stop.load()) std::this_thread::sleep_for(milliseconds(10));
  });
  std::thread duty([&] {  // 2 ms of work in every 20 ms: 10%
    duty_clock = Progress::this_thread_cpu_clock();
    ready.fetch_add(1);
    while (!stop.load()) {
      const auto until = std::chrono::steady_clock::now() + milliseconds(2);
      while (std::chrono::steady_clock::now() < until) {
      }
      std::this_thread::sleep_for(milliseconds(18));
    }
  });
  while (ready.load() < 2) std::this_thread::yield();
  const Progress of_blocked(0, blocked_clock.load()), of_duty(0, duty_clock.load());
  (void)of_blocked.token();  // the first sample
  (void)of_duty.token();
  std::this_thread::sleep_for(milliseconds(400));
  const ProgressToken b = parse_progress("x|" + of_blocked.token());
  const ProgressToken d = parse_progress("x|" + of_duty.token());
  stop.store(true);
  blocked.join();
  duty.join();
  EXPECT_FALSE(b.starved);
  EXPECT_TRUE(d.starved);
  EXPECT_FALSE(parse_progress("x|" + Progress().token()).starved);  // without a clock: never
}

}  // namespace
}  // namespace ntp::elastic
