// `ntp launch` over real `ntp train` jobs (the small test model, four workers): the exit code
// tells whether the job trained all its steps, whatever happened to the workers on the way, and
// an injected stall blocks a worker's training thread while its process lives on.
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "child_process.h"
#include "job_scratch.h"
#include "text_files.h"
#include "wait_until.h"

namespace ntp::launch {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;
using ntp::testing::count;
using ntp::testing::read_file;

// Two TP-2 replicas that may shrink to TP 1; `steps` steps.
std::vector<std::string> train_flags(const fs::path& out, int steps, int min_tp = 1) {
  return {"--domains", "2",  "--tp",          "2",    "--min-tp", std::to_string(min_tp),
          "--batch",   "16", "--micro-batch", "4",    "--steps",  std::to_string(steps),
          "--warmup",  "5",  "--timeout-ms",  "2000", "--out",    out.string()};
}

// A file store of the test's own: the test reads the workers' step reports from its files.
struct Job {
  fs::path dir;
  std::string run_id;
  fs::path key(const std::string& key) const {
    std::string escaped;
    for (char c : key) escaped += c == '/' ? std::string("%2F") : std::string(1, c);
    return dir / run_id / escaped;
  }
  std::vector<std::string> launch(std::vector<std::string> more) const {
    std::vector<std::string> args = {"--store",   "file:" + dir.string(), "--run-id", run_id,
                                     "--log-dir", (dir / "logs").string()};
    args.insert(args.end(), more.begin(), more.end());
    return args;
  }
  // The step worker `rank` last reported, -1 before any.
  long long step(int rank) const {
    try {
      return std::stoll(read_file(key("launch/step/" + std::to_string(rank))));
    } catch (const std::exception&) {
      return -1;
    }
  }
  // The pid of worker `rank` from its log header.
  pid_t pid(int rank) const {
    const std::string log = read_file(dir / "logs" / ("rank_" + std::to_string(rank) + ".log"));
    std::smatch m;
    if (!std::regex_search(log, m, std::regex("pid (\\d+)"))) return -1;
    return static_cast<pid_t>(std::stol(m[1].str()));
  }
  // `ntp launch` of the 2 x 2 job (train_flags) for `steps` steps with `--inject inject`, started.
  ntp::testing::ChildProcess start_injected(const std::string& inject, int steps) const {
    return ntp::testing::start_child(train::test_jobs::small_job(4, launch({"--inject", inject}),
                                                                 train_flags(dir / "out", steps)));
  }
  // The pid of worker `rank` once it has reported step `at`; -1 when it has not within 120 s (a
  // generous bound: four workers start on a loaded two-core machine).
  pid_t pid_at_step(int rank, long long at) const {
    const bool reached = ntp::testing::wait_until([&] { return step(rank) >= at && pid(rank) > 0; },
                                                  std::chrono::seconds(120));
    return reached ? pid(rank) : -1;
  }
};

Job make_job(const std::string& name) {
  Job job{train::test_jobs::scratch_dir() / name, name};
  fs::create_directories(job.dir);
  return job;
}

// The state letter of /proc/PID/stat (R, S, T, Z, ...), or '?' when it is gone.
char process_state(pid_t pid) {
  const std::string stat = read_file("/proc/" + std::to_string(pid) + "/stat");
  const auto close = stat.rfind(')');
  return close == std::string::npos || close + 2 >= stat.size() ? '?' : stat[close + 2];
}

// The job loses rank 1 to an injected kill and rank 2 to a SIGKILL from outside (a real crash
// the launcher did not cause; before finished reports it made `ntp launch` exit 137). Nothing is
// repaired: the job goes on at TP 1,1, trains all its steps, and the launcher exits 0 naming both.
TEST(LaunchTrainTest, AJobThatLostWorkersButTrainedAllStepsExitsZeroAndNamesThem) {
  const Job job = make_job("lost-and-finished");
  const ntp::testing::ChildProcess launcher = job.start_injected("kill:rank=1,at=3", 40);
  const pid_t victim = job.pid_at_step(2, 8);
  ASSERT_GT(victim, 0) << "rank 2 never reached step 8";
  ASSERT_EQ(::kill(victim, SIGKILL), 0);
  const ntp::testing::CommandOutput run =
      ntp::testing::finish_child(launcher, std::chrono::seconds(180));
  ASSERT_FALSE(run.timed_out) << run.out << run.err;
  EXPECT_EQ(run.exit_code, 0) << run.out << run.err;
  EXPECT_NE(run.out.find("[rank 0] done: 40 steps"), std::string::npos) << run.out;
  EXPECT_NE(run.err.find("the job finished: rank 0 reported its last step (40 steps)"),
            std::string::npos)
      << run.err;
  EXPECT_EQ(count(run.err, "lost 2 workers:"), 1) << run.err;
  EXPECT_EQ(count(run.err,
                  "rank 1 (restart 0, attempt 0): injected kill (at step 3); ended with "
                  "exit code 137 (SIGKILL)"),
            1)
      << run.err;
  EXPECT_EQ(count(run.err,
                  "rank 2 (restart 0, attempt 0): failed; ended with exit code 137 "
                  "(SIGKILL)"),
            1)
      << run.err;
}

// A job that cannot go on (both replicas below --min-tp after the kills: no replica is left to
// carry on) exits non-zero and says why.
TEST(LaunchTrainTest, AJobThatCouldNotFinishExitsNonZeroWithTheReason) {
  const Job job = make_job("could-not-finish");
  const ntp::testing::CommandOutput run = ntp::testing::run_command(
      train::test_jobs::small_job(
          4, job.launch({"--inject", "kill:rank=1,at=3", "--inject", "kill:rank=3,at=3"}),
          train_flags(job.dir / "out", 40, /*min_tp=*/2)),
      {}, std::chrono::seconds(180));
  ASSERT_FALSE(run.timed_out) << run.out << run.err;
  EXPECT_NE(run.exit_code, 0) << run.out << run.err;
  EXPECT_NE(run.err.find("the job did not finish: rank"), std::string::npos) << run.err;
  EXPECT_EQ(count(run.err, "rank 1 (restart 0, attempt 0): injected kill (at step 3)"), 1)
      << run.err;
  EXPECT_EQ(run.err.find("the job finished"), std::string::npos) << run.err;
}

// stall:rank=1,at=5: rank 1's training thread blocks at step 5 while its process (and its
// heartbeat thread) runs on; the others re-form without it and finish; the launcher kills the
// stalled worker at the end and exits 0.
TEST(LaunchTrainTest, AStalledWorkerLivesOnWhileItsStepStops) {
  const Job job = make_job("stall");
  const ntp::testing::ChildProcess launcher = job.start_injected("stall:rank=1,at=5", 30);
  const pid_t stalled = job.pid_at_step(1, 5);
  ASSERT_GT(stalled, 0) << "rank 1 never reached step 5";
  // Its heartbeat: the store key hb/<group>/1 that the trainer's heartbeat thread rewrites every
  // 100 ms (the group name is the trainer's business: any hb/.../1 key).
  fs::path beat;
  for (const fs::directory_entry& e : fs::directory_iterator(job.dir / job.run_id)) {
    const std::string name = e.path().filename().string();
    if (name.rfind("hb%2F", 0) == 0 && name.size() > 4 && name.substr(name.size() - 4) == "%2F1") {
      beat = e.path();
    }
  }
  ASSERT_FALSE(beat.empty()) << "no heartbeat key hb/.../1 in " << job.dir / job.run_id;
  const std::string first_beat = read_file(beat);
  // 0.4 s = 4 heartbeat periods, before its neighbours take it as hung (--hang-detect-ms 1000
  // after its last progress): the beat must move; the step must not (it stays 5).
  int samples = 0;
  int stopped_samples = 0;
  const auto until = Clock::now() + std::chrono::milliseconds(400);
  while (Clock::now() < until) {
    const char state = process_state(stalled);
    ASSERT_NE(state, '?') << "the stalled worker died";
    ASSERT_NE(state, 'Z') << "the stalled worker exited";
    stopped_samples += state == 'T' ? 1 : 0;
    ++samples;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_EQ(job.step(1), 5) << "a stalled worker starts no step";
  EXPECT_NE(read_file(beat), first_beat) << "the stalled worker's heartbeat thread stopped";
  EXPECT_EQ(stopped_samples, 0) << "a stall stops no process (" << samples << " samples)";
  const ntp::testing::CommandOutput run =
      ntp::testing::finish_child(launcher, std::chrono::seconds(180));
  ASSERT_FALSE(run.timed_out) << run.out << run.err;
  EXPECT_EQ(run.exit_code, 0) << run.out << run.err;
  EXPECT_EQ(count(run.err, "injecting stall into rank 1 (at step 5)"), 1) << run.err;
  EXPECT_EQ(count(run.err, "[rank 1] stalling the training thread at step 5"), 1) << run.err;
  EXPECT_NE(run.out.find("[rank 0] done: 30 steps"), std::string::npos) << run.out;
  // Its neighbours took it as hung (its progress stopped) and the job went on without it; its own
  // watch then found itself recorded silent at its progress and ended the process (exit 1).
  EXPECT_EQ(count(run.out, "[rank 1] slot 0:1: declared dead while its training thread was stuck"),
            1)
      << run.out;
  EXPECT_EQ(count(run.err,
                  "rank 1 (restart 0, attempt 0): injected stall (at step 5); ended "
                  "with exit code 1"),
            1)
      << run.err;
  EXPECT_EQ(job.step(1), 5);
}

}  // namespace
}  // namespace ntp::launch
