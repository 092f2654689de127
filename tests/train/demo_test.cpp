// A shortened `ntp demo` through the real binary: the job finishes, every injected fault is
// detected and recovered, every repair admitted, the checkpoint-restart baseline finishes too, and
// the final loss equals the failure-free run's; for the GPT-2 and for the MoE (--model moe).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "child_process.h"
#include "dependency.h"

namespace {

namespace fs = std::filesystem;

// Runs `ntp demo --steps 40` with `flags` and checks its summary.
void expect_short_demo_recovers(const std::string& flags) {
  const fs::path source(NTP_SOURCE_DIR);
  NTP_REQUIRE_DEPENDENCY(fs::exists(source / "data" / "fortunes_train.bin"),
                         "the fortunes corpus in data/ (scripts/setup.sh prepares it)");
  const fs::path out = fs::temp_directory_path() / ("ntp-demo-" + std::to_string(::getpid()));
  // The demo reads the corpus from data/ relative to the working directory: run it from the
  // source tree, as scripts/demo.sh does.
  const ntp::testing::CommandOutput run =
      ntp::testing::run_command({"/bin/sh", "-c",
                                 "cd '" + source.string() + "' && '" + NTP_BINARY +
                                     "' demo --steps 40 --out '" + out.string() + "' " + flags},
                                {}, std::chrono::seconds(300));
  ASSERT_EQ(run.exit_code, 0) << run.out << run.err;
  EXPECT_NE(run.out.find("everything this demo wrote is under " + out.string()), std::string::npos);
  std::ifstream in(out / "summary.json");
  const nlohmann::json s = nlohmann::json::parse(in);
  EXPECT_TRUE(s["finished"].get<bool>());
  EXPECT_EQ(s["steps"].get<int>(), 40);
  EXPECT_EQ(s["faults_recovered"].get<int>(), 2);  // the kill and the hang
  EXPECT_EQ(s["repairs_admitted"].get<int>(), 2);
  EXPECT_TRUE(s["restart_finished"].get<bool>());  // the checkpoint-restart baseline ran through
  EXPECT_GT(s["degraded_step_ratio"].get<double>(), 0.0);  // the report has the figure
  const double live = s["live_final_loss"].get<double>();
  const double reference = s["reference_final_loss"].get<double>();
  EXPECT_NEAR(live, reference, 1e-4 * reference);
  for (const char* file : {"report.md", "loss.svg", "loss.png", "degrees.svg", "degrees.png"}) {
    EXPECT_TRUE(fs::exists(out / file)) << file;
  }
  fs::remove_all(out);
}

TEST(DemoTest, ShortDemoRecoversEveryFaultAndEndsOnTheFailureFreeLoss) {
  expect_short_demo_recovers("");
}

// `ntp demo --model moe`: the same schedule on a MoE whose experts move to the survivors and back.
TEST(DemoTest, ShortMoeDemoRecoversEveryFaultAndEndsOnTheFailureFreeLoss) {
  expect_short_demo_recovers("--model moe");
}

}  // namespace
