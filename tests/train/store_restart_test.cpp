// The store is not a single point of failure for a running job: an `ntp launch ... ntp train` job
// (2 domains x TP 2) on `--store redis://...` has its redis-server SIGKILLed mid-run and started
// again on the same port 1.5 s later, without persistence (every key is lost). The job must finish
// every step with exactly the losses of the same job without the restart (the store is not in the
// math), without a recovery (no worker was lost, so none may be excluded), and every worker must
// have reconnected.
#include <gtest/gtest.h>
#include <signal.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>

#include "../comm/redis_server.h"
#include "child_process.h"
#include "dependency.h"
#include "job_scratch.h"

namespace ntp::train {
namespace {

namespace fs = std::filesystem;
using comm::testing::RedisServer;
using Clock = std::chrono::steady_clock;

constexpr int kSteps = 150;
// The run with the restart is paced by an emulated device: a step's 2 micro-batches of 2
// sequences sleep ~26 ms, so that its 150 steps outlast the 1.5 s outage however fast this host
// computes (the step path has no store I/O: unpaced, a fast host's steps take a few ms). The
// sleeps change no loss.
constexpr const char* kDeviceGflops = "0.25";

std::vector<std::string> job_argv(const RedisServer& server, const std::string& run_id,
                                  const fs::path& out, bool paced) {
  std::vector<std::string> train = {"--domains",     "2",
                                    "--tp",          "2",
                                    "--batch",       "8",
                                    "--micro-batch", "2",
                                    "--steps",       std::to_string(kSteps),
                                    "--warmup",      "5",
                                    "--out",         out.string(),
                                    "--timeout-ms",  "5000"};
  if (paced) train.insert(train.end(), {"--emulate-device-gflops", kDeviceGflops});
  return test_jobs::small_job(4, {"--store", server.spec(), "--run-id", run_id}, train);
}

struct Metrics {
  std::map<int64_t, double> loss;  // step -> loss
  int recoveries = 0;
  int64_t summary_steps = -1;
};

Metrics read_metrics(const fs::path& out) {
  Metrics m;
  std::ifstream in(out / "metrics.jsonl");
  for (std::string line; std::getline(in, line);) {
    const nlohmann::json j = nlohmann::json::parse(line, nullptr, false);
    if (j.is_discarded()) continue;  // a line being written
    if (j["type"] == "step") m.loss[j["step"].get<int64_t>()] = j["loss"].get<double>();
    if (j["type"] == "recovery") ++m.recoveries;
    if (j["type"] == "summary") m.summary_steps = j["steps"].get<int64_t>();
  }
  return m;
}

TEST(StoreRestartTest, AJobKeepsTrainingThroughARedisServerRestart) {
  NTP_REQUIRE_REDIS();
  RedisServer server;
  ASSERT_TRUE(server.ready());
  const std::string tag = std::to_string(::getpid());

  // The reference: the same job on the same server, undisturbed.
  const fs::path clean_out = test_jobs::scratch_dir() / "store-clean";
  const Clock::time_point clean_start = Clock::now();
  const testing::CommandOutput clean = testing::run_command(
      job_argv(server, "clean-" + tag, clean_out, false), {}, std::chrono::seconds(300));
  const double clean_s = std::chrono::duration<double>(Clock::now() - clean_start).count();
  ASSERT_EQ(clean.exit_code, 0) << clean.out << clean.err;
  const Metrics reference = read_metrics(clean_out);
  ASSERT_EQ(reference.loss.size(), static_cast<size_t>(kSteps));

  // The same job, its redis-server killed after a few steps and restarted 1.5 s later.
  const fs::path out = test_jobs::scratch_dir() / "store-restart";
  const Clock::time_point start = Clock::now();
  const testing::ChildProcess child =
      testing::start_child(job_argv(server, "restart-" + tag, out, true));
  size_t steps_at_kill = 0;
  for (int i = 0; i < 6000 && steps_at_kill < 5; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
    steps_at_kill = read_metrics(out).loss.size();
  }
  server.kill_now();
  const Clock::time_point killed = Clock::now();
  std::this_thread::sleep_for(std::chrono::milliseconds(1500));
  const size_t steps_at_restart = read_metrics(out).loss.size();
  ASSERT_TRUE(server.start());
  const double outage_s = std::chrono::duration<double>(Clock::now() - killed).count();
  const testing::CommandOutput r = testing::finish_child(child, std::chrono::seconds(300));
  const double restart_s = std::chrono::duration<double>(Clock::now() - start).count();
  const std::string log = r.out + r.err;
  ASSERT_EQ(r.exit_code, 0) << log;
  std::printf(
      "killed with %zu steps in the metrics, %zu when it came back %.2f s later; clean run "
      "%.2f s, run with the restart %.2f s\n",
      steps_at_kill, steps_at_restart, outage_s, clean_s, restart_s);
  ASSERT_GE(steps_at_kill, 5u) << "the job never got going: " << log;
  ASSERT_LT(steps_at_restart, static_cast<size_t>(kSteps))
      << "the job finished before the restart: the test proves nothing";

  const Metrics restarted = read_metrics(out);
  EXPECT_EQ(restarted.summary_steps, kSteps);
  EXPECT_EQ(restarted.recoveries, 0) << "a store outage must not look like a lost worker: " << log;
  ASSERT_EQ(restarted.loss.size(), static_cast<size_t>(kSteps)) << log;
  for (const auto& [step, loss] : reference.loss) {
    EXPECT_EQ(restarted.loss.at(step), loss) << "step " << step;  // bit-identical
  }

  // Every worker reconnected (the launcher leaves the store alone unless a fault waits for a
  // step); print how long each was cut off.
  int reconnected = 0;
  std::istringstream lines(log);
  for (std::string line; std::getline(lines, line);) {
    if (line.find("reconnected after") == std::string::npos) continue;
    ++reconnected;
    std::printf("%s\n", line.c_str());
    EXPECT_NE(line.find("restarted server"), std::string::npos) << line;
  }
  EXPECT_GE(reconnected, 4) << log;
}

}  // namespace
}  // namespace ntp::train
