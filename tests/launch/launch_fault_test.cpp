// End-to-end tests of `ntp launch --inject slow:...` (real CPU-bound worker processes, the real
// SIGSTOP/SIGCONT duty cycle) and of the launcher's main loop going on while its store is
// unreachable (a real redis-server, SIGSTOPped by the test).
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <optional>
#include <regex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "../comm/redis_server.h"
#include "child_process.h"
#include "dependency.h"
#include "text_files.h"
#include "wait_until.h"

namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;
using ntp::testing::count;
using ntp::testing::read_file;
using ntp::testing::TempDir;

ntp::testing::ChildProcess start_ntp(const std::vector<std::string>& args) {
  std::vector<std::string> argv{NTP_BINARY};
  argv.insert(argv.end(), args.begin(), args.end());
  return ntp::testing::start_child(argv);
}

long long number_in(const std::string& path) {
  try {
    return std::stoll(read_file(path));
  } catch (const std::exception&) {
    return -1;
  }
}

// The share of `samples` looks at /proc/PID/stat, one every ~4 ms (not a divisor of the 20 ms
// period, so the looks fall on every phase), that find the process stopped ('T').
double stopped_share(pid_t pid, int samples) {
  int stopped = 0;
  for (int i = 0; i < samples; ++i) {
    const std::string stat = read_file("/proc/" + std::to_string(pid) + "/stat");
    const auto close = stat.rfind(')');
    if (close != std::string::npos && close + 2 < stat.size() && stat[close + 2] == 'T') ++stopped;
    std::this_thread::sleep_for(std::chrono::microseconds(3700));
  }
  return static_cast<double>(stopped) / samples;
}

// "[rank R] tick STEP TIME" lines: TIME (s, the worker's clock) of each step, per rank.
std::map<int, std::map<int, double>> ticks(const std::string& out) {
  std::map<int, std::map<int, double>> at;
  const std::regex line(R"(\[rank (\d+)\] tick (\d+) ([0-9.]+))");
  for (std::sregex_iterator it(out.begin(), out.end(), line), end; it != end; ++it) {
    at[std::stoi((*it)[1])][std::stoi((*it)[2])] = std::stod((*it)[3]);
  }
  return at;
}

// Rank 1's step rate over its steps [from, to] divided by rank 0's over the same wall interval.
double rate_ratio(const std::map<int, std::map<int, double>>& at, int from, int to) {
  const double t0 = at.at(1).at(from);
  const double t1 = at.at(1).at(to);
  int twin_steps = 0;
  for (const auto& [step, t] : at.at(0)) twin_steps += t >= t0 && t <= t1 ? 1 : 0;
  return twin_steps == 0 ? 0.0 : static_cast<double>(to - from) / twin_steps;
}

// A CPU-bound worker (bash arithmetic) that reports each step to the file store (the launcher
// places faults by it) and prints it with its time; rank 0 runs longer, so that it is still
// running while rank 1 takes its last step. Rank 1 takes 15 + 75 / r + 210 of rank 0's step
// times, r its rate while slowed: 375 at r = 0.5, 503 at r = 0.27 (seen in a full CI run on 2
// cores, other work beside it); 700 cover r >= 0.16.
std::string spin_worker(const std::string& dir, const std::string& run_id) {
  return "echo $$ > " + dir + "/pid_$NTP_RANK.tmp && mv " + dir + "/pid_$NTP_RANK.tmp " + dir +
         "/pid_$NTP_RANK; F=" + dir + "/" + run_id +
         "/launch%2Fstep%2F$NTP_RANK; n=$((NTP_RANK == 0 ? 700 : 300)); s=0; "
         "while [ $s -lt $n ]; do echo $s > $F; echo \"tick $s $EPOCHREALTIME\"; "
         "i=0; while [ $i -lt 700 ]; do i=$((i+1)); done; s=$((s+1)); done";
}

// slow:rank=1,factor=0.5,at=15,until=90 against an unslowed twin (rank 0) in the same run.
TEST(LaunchFaultTest, ASlowedWorkerRunsSlowerUntilItsStepAndIsLeftRunning) {
  TempDir dir;
  const ntp::testing::ChildProcess launcher =
      start_ntp({"launch", "--nproc-per-node", "2", "--store", "file:" + dir.path(), "--run-id",
                 "slow", "--inject", "slow:rank=1,factor=0.5,at=15,until=90", "--", "bash", "-c",
                 spin_worker(dir.path(), "slow")});
  const std::string step_file = dir.path() + "/slow/launch%2Fstep%2F1";
  ASSERT_TRUE(ntp::testing::wait_until([&] { return number_in(step_file) >= 25; },
                                       std::chrono::seconds(60), std::chrono::milliseconds(5)));
  const auto victim = static_cast<pid_t>(number_in(dir.path() + "/pid_1"));
  ASSERT_GT(victim, 0);
  const double stopped_during = stopped_share(victim, 150);
  ASSERT_TRUE(ntp::testing::wait_until([&] { return number_in(step_file) >= 100; },
                                       std::chrono::seconds(60), std::chrono::milliseconds(5)));
  const double stopped_after = stopped_share(victim, 150);
  const ntp::testing::CommandOutput run =
      ntp::testing::finish_child(launcher, std::chrono::seconds(120));
  ASSERT_FALSE(run.timed_out) << run.err;
  EXPECT_EQ(run.exit_code, 0) << run.err;
  EXPECT_EQ(count(run.err,
                  "injecting slow (factor 0.5, SIGSTOP/SIGCONT every 20 ms) into rank "
                  "1 (at step 15, until step 90)"),
            1)
      << run.err;
  EXPECT_EQ(count(run.err, "rank 1 runs at full speed again (at step 90)"), 1) << run.err;

  const auto at = ticks(run.out);
  ASSERT_EQ(at.count(0) + at.count(1), 2U) << run.out;
  ASSERT_EQ(at.at(1).size(), 300U) << run.out;
  ASSERT_GE(at.at(0).size(), 700U) << run.out;
  // Inside the slowdown (two steps of margin each side). A 50% duty cycle gives ~0.5 on cores
  // that are not oversubscribed; on an oversubscribed machine the scheduler gives part of the
  // stopped time back (a stop takes effect only once the task is scheduled; a continued one is
  // scheduled early): measured 0.35-0.87 at load 7-15 on 2 cores, and 0.27 in a full CI run with
  // other work beside it, where the twin also gets the core the stopped worker leaves. The band
  // says "clearly slower" there and contains the ~0.5 of free cores; below 0.2 the worker would be
  // stopped well past its duty cycle (the stopped share below says how much).
  const double during = rate_ratio(at, 17, 88);
  EXPECT_GT(during, 0.20) << "slower than the factor: " << during;
  EXPECT_LT(during, 0.90) << "not slowed: " << during;
  // After until= the worker runs free: not slower than its twin beyond the noise of a shared
  // machine. Identical loops measured 0.84-1.67 of each other in one run at load 7-15 on 2 cores,
  // 0.69 over 45 steps (~0.15 s) in a full CI run beside other multi-process tests, and 0.598
  // over 125 steps in another (AMD EPYC, 2 cores): the window is now 200 steps (~0.6 s), so a
  // scheduler's uneven share averages over more of its 4 ms ticks. The rate ratio cannot prove
  // the slowdown ended on a shared machine (the twin is starved as often as the victim); the
  // stopped share of 0 below is the mechanism's exact check. The rate says the rest: above 0.5,
  // what a worker still stopped half the time reaches beside a free twin, and clearly above
  // `during`, measured in the same run. No upper bound: the victim running ahead of its twin
  // (1.96 seen in CI) is the scheduler's share, which nothing in the launcher sets.
  const double after = rate_ratio(at, 95, 295);
  EXPECT_GT(after, 0.5) << "still slowed after until: " << after;
  EXPECT_GT(after - during, 0.1) << "during " << during << ", after " << after;
  // The mechanism itself: stopped part of the time during it (~0.5 idle; 0.23-0.39 measured at
  // load 7-15, where a stop takes effect only once the worker is scheduled), never after it
  // (SIGCONT when the slowdown ended).
  EXPECT_GT(stopped_during, 0.1) << stopped_during;
  EXPECT_EQ(stopped_after, 0.0) << "the worker was left stopped after until";
  std::printf("slow 0.5: rate ratio during %.2f, after %.2f; stopped share during %.2f\n", during,
              after, stopped_during);
}

// A slowdown to the end of a worker that the launcher's SIGTERM stops: the worker is continued,
// so it runs its TERM trap and exits 0 within the grace period (a stopped one could not).
TEST(LaunchFaultTest, ASlowedWorkerIsContinuedWhenTheLauncherStops) {
  TempDir dir;
  const ntp::testing::ChildProcess launcher =
      start_ntp({"launch", "--nproc-per-node", "1", "--store", "file:" + dir.path(), "--grace", "5",
                 "--inject", "slow:rank=0,factor=0.05,at=0s", "--", "bash", "-c",
                 "trap 'echo got TERM; exit 0' TERM; echo $$ > " + dir.path() + "/pid.tmp && mv " +
                     dir.path() + "/pid.tmp " + dir.path() +
                     "/pid; while :; do i=0; while [ $i -lt 1000 ]; do i=$((i+1)); done; done"});
  ASSERT_TRUE(ntp::testing::wait_until([&] { return number_in(dir.path() + "/pid") > 0; },
                                       std::chrono::seconds(30)));
  const auto worker = static_cast<pid_t>(number_in(dir.path() + "/pid"));
  // factor 0.05: stopped 19 ms of every 20 once the slowdown began.
  ASSERT_TRUE(ntp::testing::wait_until([&] { return stopped_share(worker, 20) > 0.3; },
                                       std::chrono::seconds(30)))
      << "the slowdown never began";
  const auto sent = Clock::now();
  ASSERT_EQ(::kill(launcher.pid, SIGTERM), 0);
  const ntp::testing::CommandOutput run =
      ntp::testing::finish_child(launcher, std::chrono::seconds(30));
  EXPECT_EQ(run.exit_code, 128 + SIGTERM) << run.err;
  EXPECT_EQ(count(run.out, "[rank 0] got TERM\n"), 1) << run.out << run.err;
  // Well inside the 5 s grace: the worker was not left to the SIGKILL.
  EXPECT_LT(Clock::now() - sent, std::chrono::seconds(4));
}

// A slowed worker that is killed and repaired: the slowdown ends with it, and the fresh worker of
// the slot runs free (the cycle's signals never reach it). Rank 1 only keeps the job open until
// the repair (a launcher whose workers are all gone ends the job).
TEST(LaunchFaultTest, TheSlowdownEndsWithAKilledWorkerAndSparesItsReplacement) {
  TempDir dir;
  const std::string pid_file = dir.path() + "/pid_$NTP_RESTART_COUNT";
  const ntp::testing::ChildProcess launcher = start_ntp(
      {"launch", "--nproc-per-node", "2", "--store", "file:" + dir.path(), "--inject",
       "slow:rank=0,factor=0.2,at=0s", "--inject", "kill:rank=0,at=1.5s", "--inject",
       "repair:rank=0,at=2s", "--", "bash", "-c",
       "[ $NTP_RANK -eq 1 ] && exec sleep 5; echo $$ > " + pid_file + ".tmp && mv " + pid_file +
           ".tmp " + pid_file +
           "; end=$((SECONDS + 3)); while [ $SECONDS -lt $end ]; do i=0; "
           "while [ $i -lt 500 ]; do i=$((i+1)); done; done; echo done $NTP_RESTART_COUNT"});
  ASSERT_TRUE(ntp::testing::wait_until([&] { return number_in(dir.path() + "/pid_0") > 0; },
                                       std::chrono::seconds(30)));
  // factor 0.2: stopped 16 ms of every 20 (a share well above 0 even on a loaded machine).
  EXPECT_GT(stopped_share(static_cast<pid_t>(number_in(dir.path() + "/pid_0")), 60), 0.2);
  ASSERT_TRUE(ntp::testing::wait_until([&] { return number_in(dir.path() + "/pid_1") > 0; },
                                       std::chrono::seconds(30)));
  EXPECT_EQ(stopped_share(static_cast<pid_t>(number_in(dir.path() + "/pid_1")), 150), 0.0)
      << "the replacement was stopped";
  const ntp::testing::CommandOutput run =
      ntp::testing::finish_child(launcher, std::chrono::seconds(60));
  EXPECT_EQ(run.exit_code, 0) << run.err;
  EXPECT_EQ(count(run.out, "[rank 0] done 1\n"), 1) << run.out << run.err;
  EXPECT_EQ(count(run.err, "injecting kill (SIGKILL) into rank 0"), 1) << run.err;
  EXPECT_NE(run.err.find("rank 0 (restart 0, attempt 0): injected kill (at 1.500000 s)"),
            std::string::npos)
      << run.err;
}

// Lines of a running child with the time each arrived, read until both pipes close.
struct TimedLine {
  Clock::duration at;  // since `start`
  std::string text;
};

std::vector<TimedLine> read_timed(const ntp::testing::ChildProcess& child, Clock::time_point start,
                                  const std::function<void(Clock::duration)>& tick) {
  std::vector<TimedLine> lines;
  std::string partial[2];
  pollfd fds[2] = {{child.out_fd, POLLIN, 0}, {child.err_fd, POLLIN, 0}};
  int open_fds = 2;
  while (open_fds > 0) {
    tick(Clock::now() - start);
    if (::poll(fds, 2, 10) <= 0) continue;
    for (int i = 0; i < 2; ++i) {
      if (fds[i].fd < 0 || fds[i].revents == 0) continue;
      char buffer[4096];
      const ssize_t got = ::read(fds[i].fd, buffer, sizeof(buffer));
      if (got <= 0) {
        fds[i].fd = -1;
        --open_fds;
        continue;
      }
      partial[i].append(buffer, static_cast<std::size_t>(got));
      for (auto pos = partial[i].find('\n'); pos != std::string::npos;
           pos = partial[i].find('\n')) {
        lines.push_back(TimedLine{Clock::now() - start, partial[i].substr(0, pos)});
        partial[i].erase(0, pos + 1);
      }
    }
  }
  return lines;
}

// With the store unreachable (redis SIGSTOPped: every call waits for a reply that does not come)
// the launcher still relays a worker's output and reaps it when it exits: every store call is on
// the store thread, never on the main loop. A step fault that never fires keeps the store thread
// reading steps every 20 ms, so it is stuck in a call for the whole outage.
TEST(LaunchFaultTest, AnUnreachableStoreStopsNeitherRelayNorReaping) {
  using ntp::comm::testing::RedisServer;
  NTP_REQUIRE_REDIS();
  RedisServer server;
  ASSERT_TRUE(server.ready());
  const auto start = Clock::now();
  const ntp::testing::ChildProcess launcher =
      start_ntp({"launch", "--nproc-per-node", "2", "--store", server.spec(), "--inject",
                 "kill:rank=1,at=1000000", "--", "sh", "-c",
                 "[ $NTP_RANK -eq 0 ] && { sleep 2; echo bye; exit 3; }; sleep 7; echo done"});
  bool stopped = false;
  bool continued = false;
  const std::vector<TimedLine> lines = read_timed(launcher, start, [&](Clock::duration t) {
    // The outage: from 0.8 s (the launcher is running and polling) to 6 s.
    if (!stopped && t > std::chrono::milliseconds(800)) {
      stopped = ::kill(server.pid(), SIGSTOP) == 0;
    }
    if (stopped && !continued && t > std::chrono::seconds(6)) {
      continued = ::kill(server.pid(), SIGCONT) == 0;
    }
  });
  if (stopped && !continued) ::kill(server.pid(), SIGCONT);
  const ntp::testing::CommandOutput run =
      ntp::testing::finish_child(launcher, std::chrono::seconds(60));
  ASSERT_TRUE(stopped && continued);
  EXPECT_EQ(run.exit_code, 3);
  auto arrival = [&](const std::string& text) -> std::optional<Clock::duration> {
    for (const TimedLine& line : lines) {
      if (line.text.find(text) != std::string::npos) return line.at;
    }
    return std::nullopt;
  };
  const auto bye = arrival("[rank 0] bye");
  const auto reaped = arrival("ntp launch: rank 0 exited with code 3");
  ASSERT_TRUE(bye && reaped);
  // Both during the outage (it lasts until 6 s; the worker prints and exits at ~2 s, 2 s more
  // allow for starting on a loaded machine). The launcher before the store thread relayed and
  // reaped both at 6.00 s, when redis was continued.
  EXPECT_LT(*bye, std::chrono::seconds(4));
  EXPECT_LT(*reaped, std::chrono::seconds(6));
  // The bound: the loop looks at the pipes and the children every 10 ms; 1 s allows for a loaded
  // two-core machine. A loop that waited on the store would wait for the outage (to 6 s) or the
  // store's 10 s reply timeout.
  EXPECT_LT(*reaped - *bye, std::chrono::seconds(1));
  EXPECT_TRUE(arrival("[rank 1] done").has_value());
  std::printf("outage: output relayed at %.2f s, worker reaped %.0f ms later\n",
              std::chrono::duration<double>(*bye).count(),
              std::chrono::duration<double, std::milli>(*reaped - *bye).count());
}

}  // namespace
