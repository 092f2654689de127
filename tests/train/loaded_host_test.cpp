// A loaded host does not fence healthy workers (issue 35, item 6; docs/recovery.md, "A loaded
// host"): 3 x 4 real workers share this host's 2 cores with 48 busy processes at the same
// priority, with --hang-detect-ms 500. Their threads then get a few percent of a core: their
// first beats come late, their training threads pause for longer than a step's allowance. Their
// tokens say so (setting up, starved, beats lately late), and watchers judge them against that
// pace, so no healthy worker is taken as hung. Before that rule the same job lost healthy workers
// before its first step (a beat late in setup) and did not finish, in every run tried here. A
// stalled training thread (no CPU at all) on the same loaded host is still taken as hung.
#include <gtest/gtest.h>

#include <vector>

#include "cpu_hogs.h"
#include "recovery_jobs.h"

namespace ntp::train {
namespace {

using ntp::testing::CpuHogs;

constexpr int kHogs = 48;
constexpr int kSteps = 30;
// Half the default hang bound (a liveness period of 125 ms), and collectives that may wait long:
// under this load a step takes a few times its unloaded time.
const std::vector<std::string> kLoadedFlags = {"--hang-detect-ms", "500", "--timeout-ms", "20000"};

TEST(LoadedHostTest, HealthyWorkersOnACoreStarvedHostAreNeverFenced) {
  const JobRun clean = train("loaded-clean", kSteps, {}, {}, kLoadedFlags);
  ASSERT_EQ(clean.exit_code, 0) << clean.log;
  JobRun loaded;
  {
    const CpuHogs hogs(kHogs);
    ASSERT_EQ(hogs.size(), static_cast<std::size_t>(kHogs));
    loaded = train("loaded", kSteps, {}, {}, kLoadedFlags);
  }
  ASSERT_EQ(loaded.exit_code, 0) << loaded.log;
  EXPECT_EQ(loaded.recoveries.size(), 0u) << loaded.log;
  EXPECT_EQ(loaded.log.find("re-forming"), std::string::npos) << loaded.log;
  EXPECT_EQ(loaded.summary_steps, kSteps);
  EXPECT_EQ(loaded.degrees_at_end, (std::vector<int>{4, 4, 4}));
  // Rebalancing is on by default (issue 38): the starved workers' uneven pace is the scheduler's.
  // Even where it is sustained (CI measured one rank at 0.82 of the median for a dozen steps of
  // real compute, whose CPU time differs too under load), a move must first save what a
  // re-formation costs (speed_estimator.h): ~1 ms a step against ~0.7 s for the first job's build
  // on this loaded host. No rebalance in either run.
  EXPECT_TRUE(lines_of(clean, "rebalanced").empty()) << clean.log;
  EXPECT_TRUE(lines_of(loaded, "rebalanced").empty()) << loaded.log;
  // No re-formation: the same layout throughout, so the same losses bit for bit.
  expect_same_trajectory(loaded, clean, kSteps, 0.0);
}

TEST(LoadedHostTest, AStalledWorkerOnACoreStarvedHostIsStillTakenAsHung) {
  JobRun run;
  {
    const CpuHogs hogs(kHogs);
    run = train("loaded-stall", kSteps, {"stall:rank=9,at=5"}, {}, kLoadedFlags);
  }
  ASSERT_EQ(run.exit_code, 0) << run.log;
  ASSERT_EQ(run.recoveries.size(), 1u) << run.log;
  EXPECT_EQ(run.recoveries[0]["failed"], "2:1") << run.recoveries[0].dump();
  EXPECT_EQ(run.degrees_at_end, (std::vector<int>{4, 4, 3}));
  EXPECT_EQ(expect_each_update_applied_once(run.out, kSteps), 11) << run.log;
}

}  // namespace
}  // namespace ntp::train
