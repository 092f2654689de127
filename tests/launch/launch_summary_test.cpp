#include "launch/launch_summary.h"

#include <gtest/gtest.h>

namespace ntp::launch {
namespace {

LostWorker killed(int rank) {
  return LostWorker{rank, 0, 0, "injected kill (at step 3)", "exit code 137 (SIGKILL)"};
}

std::string joined(const std::vector<std::string>& lines) {
  std::string text;
  for (const std::string& line : lines) text += line + "\n";
  return text;
}

TEST(LaunchSummaryTest, AFinishedJobExitsZeroAndNamesItsLostWorkers) {
  JobEnd end;
  end.finished_rank = 0;
  end.finished_steps = 20;
  end.reported_steps = true;
  end.lost = {killed(1), LostWorker{2, 0, 0, "failed", "exit code 1"}};
  end.failed_rank = 2;  // a worker that failed by itself does not fail a job that finished
  end.failed_code = 1;
  EXPECT_EQ(job_exit_code(end), 0);
  const std::string text = joined(summary_lines(end, 0));
  EXPECT_NE(text.find("the job finished: rank 0 reported its last step (20 steps)"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("lost 2 workers"), std::string::npos) << text;
  EXPECT_NE(text.find("rank 1 (restart 0, attempt 0): injected kill (at step 3); ended with exit "
                      "code 137 (SIGKILL)"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("rank 2 (restart 0, attempt 0): failed; ended with exit code 1"),
            std::string::npos)
      << text;
}

TEST(LaunchSummaryTest, AnUnfinishedJobExitsNonZeroWithTheReason) {
  JobEnd failed;
  failed.failed_rank = 2;
  failed.failed_code = 42;
  EXPECT_EQ(job_exit_code(failed), 42);
  EXPECT_NE(joined(summary_lines(failed, 42)).find("rank 2 failed (exit code 42)"),
            std::string::npos);

  JobEnd all_lost;  // steps were reported, every worker was lost, nobody reported the end
  all_lost.reported_steps = true;
  all_lost.lost = {killed(0), killed(1)};
  EXPECT_EQ(job_exit_code(all_lost), 1);
  EXPECT_NE(joined(summary_lines(all_lost, 1)).find("no worker reported its last step"),
            std::string::npos);
}

TEST(LaunchSummaryTest, WorkersThatReportNothingKeepTheOldRule) {
  JobEnd quiet;  // sh -c ...: no steps, no end report
  quiet.lost = {killed(1)};
  EXPECT_EQ(job_exit_code(quiet), 0);
  JobEnd clean;
  EXPECT_EQ(job_exit_code(clean), 0);
  EXPECT_TRUE(summary_lines(clean, 0).empty());
  EXPECT_EQ(describe_exit(3), "exit code 3");
  EXPECT_EQ(describe_exit(128 + 9), "exit code 137 (SIGKILL)");
}

}  // namespace
}  // namespace ntp::launch
