// `ntp train --control-plane hierarchy` under `ntp launch --domain-size 4`: the domain hierarchy's
// runtime (elastic/hierarchy_runtime.h, driven by train/hierarchy_plane.h) in place of the flat
// protocol, on real 3 x 4 jobs with the launcher's faults: a member killed, its domain's leader
// killed (the next slot takes the lead over), a member hung (SIGSTOP, seen by its beat), a member's
// training thread stalled (seen by its progress, carried in its beat), and a second worker killed
// inside the first one's re-formation (a fault point). Each job must do what the flat protocol's
// LiveRecoveryTest asserts: exit 0 after every step, each step's update applied exactly once on
// every worker that finished, every loss on the failure-free run's trajectory within
// kDegradedTolerance, and the layouts the faults leave.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "recovery_jobs.h"

namespace ntp::train {
namespace {

constexpr int kSteps = 24;

const std::vector<std::string> kHierarchy = {"--control-plane", "hierarchy"};
const std::vector<std::string> kDomains = {"--domain-size", "4"};

JobRun hierarchy_job(const std::string& name, const std::vector<std::string>& faults,
                     const std::vector<std::string>& env = {}) {
  return train(name, kSteps, faults, env, kHierarchy, test_jobs::small_model(), kDomains);
}

class HierarchyRecoveryTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { clean_ = new JobRun(train("hier-clean", kSteps, {})); }
  static void TearDownTestSuite() { delete clean_; }

  // The job's trajectory is the failure-free one's, and its re-formations end at `degrees`.
  static void expect_recovered(const JobRun& run, size_t recoveries,
                               const std::vector<int>& degrees) {
    ASSERT_EQ(clean_->exit_code, 0) << clean_->log;
    expect_same_trajectory(run, *clean_, kSteps, kDegradedTolerance);
    EXPECT_EQ(run.recoveries.size(), recoveries) << run.log;
    EXPECT_EQ(run.degrees_at_end, degrees) << run.log;
  }

  // One fault of domain 1: one re-formation, onto global `epoch`, without slot `failed`.
  static void expect_one_recovery(const JobRun& run, const std::string& failed, int epoch) {
    expect_recovered(run, 1, {4, 3, 4});
    ASSERT_EQ(run.recoveries.size(), 1U);
    EXPECT_EQ(run.recoveries[0]["failed"], failed);
    EXPECT_EQ(run.recoveries[0]["epoch"], epoch);
  }

  // The stalled worker `who` ("[rank R] slot D:S") said once that it was fenced.
  static void expect_fenced_once(const JobRun& run, const std::string& who) {
    const std::string fenced = who + ": declared dead while its training thread was stuck";
    const size_t at = run.log.find(fenced);
    ASSERT_NE(at, std::string::npos) << run.log;
    EXPECT_EQ(run.log.find(fenced, at + 1), std::string::npos) << run.log;
  }

  static JobRun* clean_;
};

JobRun* HierarchyRecoveryTest::clean_ = nullptr;

TEST_F(HierarchyRecoveryTest, AKilledMemberIsDroppedAndTheJobGoesOnAtTpThree) {
  expect_one_recovery(hierarchy_job("hier-kill", {"kill:rank=5,at=8"}), "1:1", 1);
}

// On the hierarchy's global epoch 2, not the flat protocol's 1: the slot that takes the lead over
// gives up the epoch its predecessor may have died in (HierarchyRuntimeTest's rule).
TEST_F(HierarchyRecoveryTest, AKilledLeaderIsTakenOverAndItsSlotDropped) {
  expect_one_recovery(hierarchy_job("hier-leader", {"kill:rank=4,at=8"}), "1:0", 2);
}

TEST_F(HierarchyRecoveryTest, AHungMemberIsSeenByItsDomainsBeatAndDropped) {
  expect_one_recovery(hierarchy_job("hier-hang", {"hang:rank=6,at=8"}), "1:2", 1);
}

// A training thread that stalls while its process and its runtime live (`--inject stall:`, the
// usual "NCCL hang"): the domain's beat carries the training thread's progress, so the domain
// takes it as hung and re-forms without it, and the stalled process, declared dead while its
// progress stands, leaves as the flat watch's fence has it (once). Before the beat carried it,
// the runtime's own progress moved and the job waited for rank 6 until its collectives' timeout.
TEST_F(HierarchyRecoveryTest, AStalledTrainingThreadIsSeenByItsProgressAndFenced) {
  const JobRun run = hierarchy_job("hier-stall", {"stall:rank=6,at=8"});
  expect_one_recovery(run, "1:2", 1);
  expect_fenced_once(run, "[rank 6] slot 1:2");
}

// The same stall in a domain's leader: its domain re-forms without it and the next slot takes the
// lead over (global epoch 2, as for a killed leader), although the stalled leader's process,
// runtime and beat on the global store live on until it is fenced.
TEST_F(HierarchyRecoveryTest, AStalledLeaderIsFencedAndItsLeadTakenOver) {
  const JobRun run = hierarchy_job("hier-stall-leader", {"stall:rank=4,at=8"});
  expect_one_recovery(run, "1:0", 2);
  expect_fenced_once(run, "[rank 4] slot 1:0");
}

// Rank 9 (slot 1 of domain 2) dies when the re-formation after rank 5's kill builds its job:
// that re-formation fails and the next one drops both.
TEST_F(HierarchyRecoveryTest, ASecondKillInsideTheReformationIsDroppedToo) {
  const JobRun run =
      hierarchy_job("hier-nested", {"kill:rank=5,at=8"}, {"NTP_FAULT_POINT=reform_build:8:9"});
  ASSERT_FALSE(run.recoveries.empty()) << run.log;
  expect_recovered(run, run.recoveries.size(), {4, 3, 3});
  EXPECT_EQ(run.recoveries.back()["failed"], "1:1,2:1");
}

// Without the launcher's domain stores, or with a replacement worker, the job does not start: exit
// 2 naming what to give.
TEST(HierarchyLaunchCheckTest, TheHierarchyNeedsTheLaunchersDomainStoresAndNoJoiners) {
  const JobRun no_domains = train("hier-no-domains", 4, {}, {}, kHierarchy);
  EXPECT_EQ(no_domains.exit_code, 2) << no_domains.log;
  EXPECT_NE(no_domains.log.find("--control-plane hierarchy needs `ntp launch --domain-size 4`"),
            std::string::npos)
      << no_domains.log;
  const JobRun repaired = hierarchy_job("hier-repair", {"kill:rank=5,at=3", "repair:rank=5,at=5"});
  EXPECT_NE(repaired.log.find("a replacement worker cannot join a --control-plane hierarchy job"),
            std::string::npos)
      << repaired.log;
}

}  // namespace
}  // namespace ntp::train
