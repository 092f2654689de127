// Faults inside a re-formation, with real processes (docs/recovery.md): a worker SIGKILLs itself at
// each fault point of the re-formation (train/fault_point.h) while the survivors re-form after a
// first fault, in each role the victim can hold; two and three faults inside one re-formation;
// a member that fails where the others go on (the rollback path); a training thread that stalls
// while its process lives. Every time the job finishes, each step's update is applied exactly once
// on every worker that finishes (counted from the workers' event logs, not from logged steps), and
// the losses stay on the failure-free run's trajectory.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <ostream>
#include <string>
#include <vector>

#include "job_scratch.h"
#include "json_lines.h"
#include "recovery_jobs.h"

namespace ntp::train {
namespace {

namespace fs = std::filesystem;

const JobRun& clean_run() {
  static const JobRun clean = train("reform-clean", 10, {});
  return clean;
}

// How many workers finish the job: every slot less the workers killed, plus the replacements the
// launcher started (from its lines and the fault points' in the log).
int finishing_workers(const JobRun& run) {
  auto count = [&run](const std::string& what) {
    int n = 0;
    for (size_t at = run.log.find(what); at != std::string::npos; at = run.log.find(what, at + 1)) {
      ++n;
    }
    return n;
  };
  return 12 - count("ntp fault point: SIGKILL") - count("injecting kill") +
         count("repair: starting a fresh worker");
}

// How many lines of `event` the job `name`'s 12 ranks wrote to their event logs.
int count_events(const std::string& name, const std::string& event) {
  int n = 0;
  for (int rank = 0; rank < 12; ++rank) {
    for (const nlohmann::json& e :
         ntp::testing::read_json_lines(test_jobs::scratch_dir() / name / "events" /
                                       ("rank_" + std::to_string(rank) + ".jsonl"))) {
      n += e["event"] == event ? 1 : 0;
    }
  }
  return n;
}

struct Case {
  const char* phase;
  const char* role;
};

void PrintTo(const Case& c, std::ostream* os) { *os << c.phase << " x " << c.role; }

std::string case_name(const ::testing::TestParamInfo<Case>& info) {
  return std::string(info.param.phase) + "_" + info.param.role;
}

class ReformationFaultTest : public ::testing::TestWithParam<Case> {};

// Rank 6 (replica 1) dies in the forward of step 5; while the others re-form, the victim of the
// second fault dies at the case's fault point. Roles: the decider of the epoch, world rank 0 (the
// leader), rank 2 (the DP peer that holds the lost slot's units: the reshard's source), rank 5 (a
// member of the degraded replica), and a joiner (rank 6's replacement, dying in its admission's
// re-formation).
TEST_P(ReformationFaultTest, TheJobFinishesWithEveryUpdateAppliedOnce) {
  const Case c = GetParam();
  const std::string name = std::string("reform-") + c.phase + "-" + c.role;
  std::vector<std::string> faults;
  std::string point;
  if (std::string(c.role) == "joiner") {
    faults = {"kill:rank=6,at=3", "repair:rank=6,at=5"};
    point = std::string(c.phase) + ":*:6";
  } else {
    const std::string victim = std::string(c.role) == "decider"  ? "decider@1"
                               : std::string(c.role) == "leader" ? "0"
                               : std::string(c.role) == "keeper" ? "2"
                                                                 : "5";
    // Any step: a member's re-formation runs at its committed step, and an abort can cut a
    // member's allreduce of step 5 that the others completed, leaving it at step 4 (seen once
    // on a 2-core host: the keeper's point at step 5 never fired). The only re-formations of
    // these runs come after the kill, so the point fires in the first of them.
    point = std::string("forward:5:6,") + c.phase + ":*:" + victim;
  }
  const JobRun run = train(name, 10, faults, {"NTP_FAULT_POINT=" + point});
  ASSERT_EQ(clean_run().exit_code, 0) << clean_run().log;
  expect_same_trajectory(run, clean_run(), 10, kDegradedTolerance);
  EXPECT_EQ(expect_each_update_applied_once(run.out, 10), finishing_workers(run)) << run.log;
  EXPECT_NE(run.log.find("ntp fault point: SIGKILL in " + std::string(c.phase)), std::string::npos)
      << "the second fault never fired: " << run.log;
}

INSTANTIATE_TEST_SUITE_P(
    PointsAndRoles, ReformationFaultTest,
    ::testing::Values(Case{"reform_agreed", "decider"}, Case{"reform_agreed", "leader"},
                      Case{"reform_agreed", "keeper"}, Case{"reform_agreed", "degraded"},
                      Case{"reform_agreed", "joiner"}, Case{"reform_planned", "decider"},
                      Case{"reform_planned", "leader"}, Case{"reform_planned", "keeper"},
                      Case{"reform_planned", "degraded"}, Case{"reform_planned", "joiner"},
                      Case{"reform_build", "decider"}, Case{"reform_build", "leader"},
                      Case{"reform_build", "keeper"}, Case{"reform_build", "degraded"},
                      Case{"reform_build", "joiner"}, Case{"reform_reshard", "decider"},
                      Case{"reform_reshard", "leader"}, Case{"reform_reshard", "keeper"},
                      Case{"reform_reshard", "degraded"}, Case{"reform_reshard", "joiner"},
                      Case{"reform_commit", "decider"}, Case{"reform_commit", "leader"},
                      Case{"reform_commit", "keeper"}, Case{"reform_commit", "degraded"},
                      Case{"reform_commit", "joiner"}),
    case_name);

// Three faults in one re-formation: rank 6 dies in step 5, rank 5 while the communicators of the
// first attempt are built, rank 10 in the reshard of the second; the third attempt completes.
// Placed with `ntp launch --inject point:` (the launcher hands them to the workers).
TEST(ReformationTest, ThreeFaultsInsideOneReformation) {
  const JobRun run =
      train("reform-three", 10,
            {"point:phase=forward,at=5,rank=6", "point:phase=reform_build,at=5,rank=5",
             "point:phase=reform_reshard,at=5,rank=10"});
  expect_same_trajectory(run, clean_run(), 10, kDegradedTolerance);
  EXPECT_EQ(expect_each_update_applied_once(run.out, 10), 9) << run.log;
  EXPECT_EQ(finishing_workers(run), 9) << run.log;
  EXPECT_EQ(run.degrees_at_end, (std::vector<int>{4, 2, 3}));
}

// Two faults: the decider of the first re-formation dies right after publishing, and a member of
// the next epoch dies in its commit exchange.
TEST(ReformationTest, TwoFaultsTheDeciderAndTheCommit) {
  const JobRun run = train("reform-two", 10, {},
                           {"NTP_FAULT_POINT=forward:5:6,reform_agreed:*:decider@1,"
                            "reform_commit:*:9"});
  expect_same_trajectory(run, clean_run(), 10, kDegradedTolerance);
  EXPECT_EQ(expect_each_update_applied_once(run.out, 10), finishing_workers(run)) << run.log;
  // The step in the line is the decider's committed step: 5, or 4 for a decider of another DP
  // set than rank 6 that was still finishing step 4 (see ZeroOneNestedFaultsRecoverFromTheCopies).
  EXPECT_TRUE(
      run.log.find("SIGKILL in reform_agreed of step 5 as the decider@1") != std::string::npos ||
      run.log.find("SIGKILL in reform_agreed of step 4 as the decider@1") != std::string::npos)
      << run.log;
}

// The rollback path, on purpose: rank 6 fails in the optimizer of step 5 after the step's world
// all-reduce, so the eleven others apply update 5 and rank 6 does not. The agreement keeps every
// member (rank 6 lives) and agrees on step 5: the eleven take their update back, with its step.
// The layout history is the failure-free run's, so losses and final weights are bit-identical.
TEST(ReformationTest, AMemberThatFailsWhereTheOthersGoOnIsRolledBackTo) {
  const fs::path dumps = test_jobs::scratch_dir() / "reform-rollback-weights";
  const JobRun clean =
      train("reform-rollback-clean", 10, {}, {}, {"--dump-dir", (dumps / "clean").string()});
  ASSERT_EQ(clean.exit_code, 0) << clean.log;
  const JobRun run = train("reform-rollback", 10, {}, {"NTP_FAULT_POINT=optimizer:5:6:fail"},
                           {"--dump-dir", (dumps / "faulty").string()});
  expect_same_trajectory(run, clean, 10, 0.0);  // bit-identical: the same layouts throughout
  ASSERT_EQ(run.recoveries.size(), 1u) << run.log;
  EXPECT_TRUE(run.recoveries[0]["rolled_back"].get<bool>()) << run.recoveries[0].dump();
  EXPECT_EQ(run.recoveries[0]["step"].get<int>(), 5);
  EXPECT_EQ(run.degrees_at_end, (std::vector<int>{4, 4, 4}));
  const int rolled_back = count_events("reform-rollback", "rolled_back");
  EXPECT_EQ(rolled_back, 11);  // every member but the one that failed, once
  EXPECT_EQ(expect_each_update_applied_once(run.out, 10), 12);
  const std::vector<float> a = dumped_weights(dumps / "clean");
  const std::vector<float> b = dumped_weights(dumps / "faulty");
  ASSERT_FALSE(a.empty());
  EXPECT_EQ(a, b);
}

// ZeRO-1, two faults in one re-formation: rank 6 dies in step 5, rank 9 (another DP set) in the
// reshard of the first attempt (at any step: a re-formation's fault step is the step its member
// had committed, 4 or 5 for a member of another DP set, as the note on the agreed step says). Both
// lost ranks' moments have live copies (rank 6's on rank 10, rank 9's on rank 1), so every
// re-formation moves state live and nothing is recomputed.
TEST(ReformationTest, ZeroOneNestedFaultsRecoverFromTheCopies) {
  const std::vector<std::string> zero1 = {"--optimizer", "sharded"};
  const JobRun clean = train("reform-zero1-clean", 10, {}, {}, zero1);
  ASSERT_EQ(clean.exit_code, 0) << clean.log;
  const JobRun run = train("reform-zero1-nested", 10, {},
                           {"NTP_FAULT_POINT=forward:5:6,reform_reshard:*:9"}, zero1);
  ASSERT_EQ(run.exit_code, 0) << run.log;
  expect_same_trajectory(run, clean, 10, kDegradedTolerance);
  EXPECT_EQ(expect_each_update_applied_once(run.out, 10), 10) << run.log;
  ASSERT_EQ(run.recoveries.size(), 1u) << run.log;
  EXPECT_EQ(run.recoveries[0]["state_from"], "live") << run.recoveries[0].dump();
  // The agreed step is the lowest step a survivor claims. Rank 6 dies entering step 5, so every
  // member of its DP sets has finished step 4; a member of another set can still be publishing
  // step 4's update (ZeRO-1's gather) when the abort reaches it. Then it claims 4 and the members
  // that finished step 4 take its update back. Which of the two happens is the scheduler's choice
  // (CI saw both); each is exact, and the trajectory check above holds for both.
  const int step = run.recoveries[0]["step"].get<int>();
  const bool rolled_back = run.recoveries[0]["rolled_back"].get<bool>();
  EXPECT_TRUE((step == 5 && !rolled_back) || (step == 4 && rolled_back))
      << run.recoveries[0].dump();
  EXPECT_EQ(run.degrees_at_end, (std::vector<int>{4, 3, 3}));
}

// ZeRO-1, an update that fails half done: rank 6 fails in the optimizer of step 5, so the others'
// publication of the updated weights (a collective with rank 6) fails after their own update.
// Every member is then ahead of the step it claims, takes its update back before re-forming
// (`update_undone`, once each), and re-forms at step 5 with every member. The layout history is
// the failure-free run's, so losses and final weights are bit-identical.
TEST(ReformationTest, ZeroOneUpdateThatFailsHalfDoneIsTakenBack) {
  const std::vector<std::string> zero1 = {"--optimizer", "sharded"};
  const fs::path dumps = test_jobs::scratch_dir() / "reform-zero1-undo-weights";
  std::vector<std::string> clean_flags = zero1, faulty_flags = zero1;
  clean_flags.insert(clean_flags.end(), {"--dump-dir", (dumps / "clean").string()});
  faulty_flags.insert(faulty_flags.end(), {"--dump-dir", (dumps / "faulty").string()});
  const JobRun clean = train("reform-zero1-undo-clean", 10, {}, {}, clean_flags);
  ASSERT_EQ(clean.exit_code, 0) << clean.log;
  const JobRun run =
      train("reform-zero1-undo", 10, {}, {"NTP_FAULT_POINT=optimizer:5:6:fail"}, faulty_flags);
  ASSERT_EQ(run.exit_code, 0) << run.log;
  expect_same_trajectory(run, clean, 10, 0.0);  // bit-identical: the same layouts throughout
  ASSERT_EQ(run.recoveries.size(), 1u) << run.log;
  EXPECT_EQ(run.recoveries[0]["step"].get<int>(), 5);
  EXPECT_EQ(run.recoveries[0]["state_from"], "live");
  const int undone = count_events("reform-zero1-undo", "update_undone");
  EXPECT_EQ(undone, 11);  // every member but the one that failed before its update, once
  EXPECT_EQ(expect_each_update_applied_once(run.out, 10), 12);
  const std::vector<float> a = dumped_weights(dumps / "clean");
  const std::vector<float> b = dumped_weights(dumps / "faulty");
  ASSERT_FALSE(a.empty());
  EXPECT_EQ(a, b);
}

}  // namespace
}  // namespace ntp::train
