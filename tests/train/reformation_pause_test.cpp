// Hangs inside a re-formation, with real processes (docs/recovery.md): a worker SIGSTOPs itself
// (train/fault_point.h, `:stop`) while the survivors re-form after a first fault, so its process,
// heartbeat thread included, stops where a SIGKILL test would have killed it. Once in the
// reshard (the failure watch must take it as hung, the epoch is given up and retried without it)
// and once as the decider between deciding the member list and publishing it (the waiters must
// give the epoch up and agree on the next one with another decider). Every time the job finishes,
// each update is applied exactly once on every finishing worker, the losses stay on the
// failure-free run's trajectory, the epochs agreed are exactly those the protocol makes, and
// `ntp launch` kills the stopped worker once the others finished, leaving no process behind.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/types.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "job_scratch.h"
#include "json_lines.h"
#include "recovery_jobs.h"
#include "text_files.h"

namespace ntp::train {
namespace {

namespace fs = std::filesystem;
using ntp::testing::count;

// The hang bound of these jobs, passed as --hang-detect-ms (the timing bounds below use it).
constexpr double kHangDetectS = 1.0;
// What a loaded 2-core machine adds to a detection: store latency, scheduling (as the stall
// test's bound, tests/train/live_recovery_test.cpp).
constexpr double kSlackS = 0.5;
// elastic::liveness_period(--hang-detect-ms): workers beat, and watches (and the agreement's
// waiters) look at the beats, every 250 ms. A detection comes after the stopped worker's last
// beat was seen (at most one look after that beat) has stood still for --hang-detect-ms, at the
// next look: no later than the stop + kHangDetectS + 2 periods (+ kSlackS).
constexpr double kLivenessPeriodS = 0.25;
// How long before its stop a stopped process's last beat may have come: one beat period plus the
// beat's store write and wake-up, which a loaded machine stretches: two periods.
constexpr double kBeatLagS = 2 * kLivenessPeriodS;
constexpr double kDetectBoundS = kHangDetectS + 2 * kLivenessPeriodS + kSlackS;

const JobRun& clean_run() {
  static const JobRun clean = train("pause-clean", 10, {});
  return clean;
}

JobRun train_with_points(const std::string& name, const std::string& points) {
  return train(name, 10, {}, {"NTP_FAULT_POINT=" + points}, {"--hang-detect-ms", "1000"});
}

// A fault point's line in the job's output: the rank that printed it (the launcher's
// "[rank R] " prefix) and its moment (Unix seconds, the event logs' clock).
struct FaultLine {
  int rank = -1;
  double time = 0.0;
};

std::optional<FaultLine> fault_line(const std::string& log, const std::string& what) {
  const std::string mark = "ntp fault point: " + what + " at ";
  const size_t at = log.find(mark);
  if (at == std::string::npos) return std::nullopt;
  const size_t line = log.rfind('\n', at) == std::string::npos ? 0 : log.rfind('\n', at) + 1;
  if (log.compare(line, 6, "[rank ") != 0) return std::nullopt;
  return FaultLine{std::stoi(log.substr(line + 6)), std::stod(log.substr(at + mark.size(), 20))};
}

std::vector<nlohmann::json> events(const fs::path& out, int rank) {
  return ntp::testing::read_json_lines(out / "events" /
                                       ("rank_" + std::to_string(rank) + ".jsonl"));
}

// The `agreed` events of `rank`, in order.
std::vector<nlohmann::json> agreed(const fs::path& out, int rank) {
  std::vector<nlohmann::json> out_events;
  for (const nlohmann::json& e : events(out, rank)) {
    if (e["event"] == "agreed") out_events.push_back(e);
  }
  return out_events;
}

bool finished(const fs::path& out, int rank) {
  const std::vector<nlohmann::json> all = events(out, rank);
  return std::any_of(all.begin(), all.end(),
                     [](const nlohmann::json& e) { return e["event"] == "finished"; });
}

// Ranks 0..11 less `lost`, increasing.
std::vector<int> all_but(const std::vector<int>& lost) {
  std::vector<int> ranks;
  for (int r = 0; r < 12; ++r) {
    if (std::find(lost.begin(), lost.end(), r) == lost.end()) ranks.push_back(r);
  }
  return ranks;
}

// The `agreed` events of every worker but `lost`, by rank: each of them must have finished and
// agreed exactly `epochs` epochs (a failure is recorded, and that rank left out, otherwise).
std::map<int, std::vector<nlohmann::json>> survivors_agreed(const JobRun& run,
                                                            const std::vector<int>& lost,
                                                            std::size_t epochs) {
  std::map<int, std::vector<nlohmann::json>> by_rank;
  for (int rank : all_but(lost)) {
    EXPECT_TRUE(finished(run.out, rank)) << "rank " << rank;
    std::vector<nlohmann::json> agreed_by_rank = agreed(run.out, rank);
    EXPECT_EQ(agreed_by_rank.size(), epochs) << "rank " << rank << "\n" << run.log;
    if (agreed_by_rank.size() == epochs) by_rank[rank] = std::move(agreed_by_rank);
  }
  return by_rank;
}

// The processes whose command line has `out` (the job's --out) as an argument. `ntp launch`
// reaps every worker before it returns, so there must be none; any found are SIGKILLed here, so
// that a failing run does not leave a stopped worker behind.
std::vector<pid_t> kill_leftover_workers(const fs::path& out) {
  std::vector<pid_t> left;
  const std::string arg = out.string() + '\0';
  for (const auto& entry : fs::directory_iterator("/proc")) {
    const std::string name = entry.path().filename().string();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::ifstream in(entry.path() / "cmdline", std::ios::binary);
    const std::string cmdline((std::istreambuf_iterator<char>(in)),
                              std::istreambuf_iterator<char>());
    if (cmdline.find('\0' + arg) == std::string::npos) continue;
    left.push_back(static_cast<pid_t>(std::stol(name)));
    ::kill(left.back(), SIGKILL);
  }
  return left;
}

// What `ntp launch` must say of a worker that stopped itself: taken as hung at once, and killed
// when the others finished (its exit does not fail the job: the job finished).
void expect_stopped_worker_killed_at_the_end(const JobRun& run, int rank) {
  const std::string who = "rank " + std::to_string(rank);
  EXPECT_EQ(count(run.log, "ntp launch: " + who + " was stopped by a signal: taken as hung"), 1)
      << run.log;
  EXPECT_EQ(count(run.log, who + " (restart 0, attempt 0): stopped by a signal; ended with exit "
                                 "code 137 (SIGKILL) (killed when the others finished)"),
            1)
      << run.log;
  EXPECT_EQ(kill_leftover_workers(run.out), std::vector<pid_t>{}) << "a worker outlived the job";
}

// Rank 6 dies in the forward of step 5; while the eleven others re-form (epoch 1), rank 10
// (slot 2:2) SIGSTOPs itself before the state moves. Its ring neighbours' failure watch takes it
// as hung (its beat stands still), records it silent and posts epoch 1's failure notice; every
// member's reshard is aborted, epoch 1 is given up (no member completed it), and epoch 2's
// decider takes rank 10 as gone at once (the silent record) and publishes the ten others, from
// the base of epoch 0.
TEST(ReformationPauseTest, AWorkerStoppedInTheReshardIsTakenAsHungAndTheRetryGoesOnWithout) {
  const JobRun run = train_with_points("pause-reshard", "forward:5:6,reform_reshard:*:10:stop");
  ASSERT_EQ(clean_run().exit_code, 0) << clean_run().log;
  expect_same_trajectory(run, clean_run(), 10, kDegradedTolerance);
  const std::vector<int> lost = {6, 10};
  EXPECT_EQ(expect_each_update_applied_once(run.out, 10), 10) << run.log;
  EXPECT_EQ(run.degrees_at_end, (std::vector<int>{4, 3, 3}));
  const std::optional<FaultLine> stop = fault_line(run.log, "SIGSTOP in reform_reshard of step 5");
  ASSERT_TRUE(stop.has_value()) << "the stop never fired: " << run.log;
  EXPECT_EQ(stop->rank, 10);
  // Exactly two epochs, on every worker that finished (rank 0, the leader, among them): epoch 1
  // with rank 10, which never completed, and epoch 2 without it, from epoch 0's state.
  for (const auto& [rank, epochs] : survivors_agreed(run, lost, 2)) {
    SCOPED_TRACE("rank " + std::to_string(rank));
    EXPECT_EQ(epochs[0]["epoch"], 1);
    EXPECT_EQ(epochs[0]["members"].get<std::vector<int>>(), all_but({6}));
    EXPECT_EQ(epochs[1]["epoch"], 2);
    EXPECT_EQ(epochs[1]["members"].get<std::vector<int>>(), all_but(lost));
    EXPECT_EQ(epochs[1]["base_epoch"], 0);
  }
  EXPECT_EQ(agreed(run.out, 10).size(), 1u);        // epoch 1, then it stopped
  ASSERT_EQ(run.recoveries.size(), 1u) << run.log;  // the one re-formation that completed
  EXPECT_EQ(run.recoveries[0]["epoch"], 2);
  EXPECT_EQ(run.recoveries[0]["old_degrees"].get<std::vector<int>>(), (std::vector<int>{4, 4, 4}));
  // The detection (the recovery line's detect_s is rank 6's, the first fault's): the first watch
  // that aborted for rank 10's stillness, from the moment it stopped. Its last beat, which came
  // shortly before the stop (kBeatLagS), must stand still for --hang-detect-ms first; then the
  // watch's looks (kDetectBoundS) and the slack of a loaded machine.
  double detected = 0.0;
  for (int rank : all_but(lost)) {
    for (const nlohmann::json& e : events(run.out, rank)) {
      if (e["event"] == "step_failed" && e.contains("reason") &&
          e["reason"].get<std::string>().starts_with("rank 10 made no progress: ") &&
          (detected == 0.0 || e["time"] < detected)) {
        detected = e["time"].get<double>();
      }
    }
  }
  ASSERT_GT(detected, 0.0) << run.log;
  std::printf("stopped worker taken as hung %.3f s after it stopped (bound %.1f s)\n",
              detected - stop->time, kDetectBoundS);
  EXPECT_GE(detected - stop->time, kHangDetectS - kBeatLagS);
  EXPECT_LE(detected - stop->time, kDetectBoundS);
  expect_stopped_worker_killed_at_the_end(run, 10);
}

// Rank 6 dies in the forward of step 5; the decider of epoch 1 (whichever survivor claimed it
// first) decides the list and SIGSTOPs itself before publishing it. No list of epoch 1
// ever exists: each waiter gives the epoch up once the decider's beat has stood still for
// --hang-detect-ms, and they agree on epoch 2 with another decider, which takes the stopped one
// as gone (it never announced, its beat stands still) and publishes the ten others.
TEST(ReformationPauseTest, ADeciderStoppedBeforePublishingIsGivenUpAndTheNextEpochGoesOn) {
  const JobRun run =
      train_with_points("pause-decider", "forward:5:6,decider_publish:5:decider@1:stop");
  ASSERT_EQ(clean_run().exit_code, 0) << clean_run().log;
  expect_same_trajectory(run, clean_run(), 10, kDegradedTolerance);
  const std::optional<FaultLine> stop =
      fault_line(run.log, "SIGSTOP in decider_publish of step 5 as the decider@1");
  ASSERT_TRUE(stop.has_value()) << "the stop never fired: " << run.log;
  const int decider = stop->rank;
  ASSERT_NE(decider, 6);
  const std::vector<int> lost = {6, decider};
  EXPECT_EQ(expect_each_update_applied_once(run.out, 10), 10) << run.log;
  std::vector<int> degrees = {4, 4, 4};
  for (int r : lost) --degrees[static_cast<size_t>(r / 4)];  // slot r / 4 : r % 4
  EXPECT_EQ(run.degrees_at_end, degrees);
  // One epoch agreed by every worker that finished (the leader among them), epoch 2, without the
  // stopped decider; epoch 1 by no one (it never got a list), the stopped decider agreed none.
  double first = 0.0, last = 0.0;  // when the finishing workers received epoch 2's list
  for (const auto& [rank, epochs] : survivors_agreed(run, lost, 1)) {
    SCOPED_TRACE("rank " + std::to_string(rank));
    EXPECT_EQ(epochs[0]["epoch"], 2);
    EXPECT_EQ(epochs[0]["members"].get<std::vector<int>>(), all_but(lost));
    const double t = epochs[0]["time"].get<double>();
    first = first == 0.0 ? t : std::min(first, t);
    last = std::max(last, t);
  }
  EXPECT_EQ(agreed(run.out, decider).size(), 0u);
  EXPECT_FALSE(finished(run.out, decider));
  ASSERT_EQ(run.recoveries.size(), 1u) << run.log;
  EXPECT_EQ(run.recoveries[0]["epoch"], 2);
  // Timing, from the stop: no waiter gives the decider up before its last beat (shortly before
  // the stop, kBeatLagS) stood still for --hang-detect-ms. The waiter that gives up records the
  // silence (as the failure watch does), so epoch 2's decider takes the stopped one as gone at
  // once: one bound, not two.
  std::printf("epoch 2 agreed %.3f-%.3f s after the decider of epoch 1 stopped (bound %.1f s)\n",
              first - stop->time, last - stop->time, kDetectBoundS);
  EXPECT_GE(first - stop->time, kHangDetectS - kBeatLagS);
  EXPECT_LE(last - stop->time, kDetectBoundS);
  expect_stopped_worker_killed_at_the_end(run, decider);
}

}  // namespace
}  // namespace ntp::train
