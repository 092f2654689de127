// What the live-recovery tests share: running a 3 x 4 `ntp launch ... ntp train` job of the small
// test model with injected faults, reading its metrics, comparing its trajectory with a
// failure-free run, and the chaos run (random kills, hangs and repairs) that both the default
// suite (12 faults) and the soak target (100 faults) use.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "child_process.h"
#include "core/rng.h"
#include "job_scratch.h"

namespace ntp::train {

struct JobRun {
  int exit_code = -1;
  std::string log;
  std::map<int64_t, double> loss;  // step -> loss of its last (committed) execution
  std::vector<nlohmann::json> recoveries;
  int64_t summary_steps = -1;
  std::vector<int> degrees_at_end;
  std::vector<nlohmann::json> power;  // power settings the leader asked for
};

inline JobRun train(const std::string& name, int steps, const std::vector<std::string>& faults,
                    const std::vector<std::string>& env = {},
                    const std::vector<std::string>& extra = {}) {
  const std::filesystem::path out = test_jobs::scratch_dir() / name;
  std::vector<std::string> launch;
  for (const std::string& f : faults) {
    launch.push_back("--inject");
    launch.push_back(f);
  }
  std::vector<std::string> args =
      test_jobs::small_job(12, launch, {"--domains",     "3",
                                        "--tp",          "4",
                                        "--batch",       "12",
                                        "--micro-batch", "2",
                                        "--steps",       std::to_string(steps),
                                        "--warmup",      "5",
                                        "--out",         out.string(),
                                        "--timeout-ms",  "2000",
                                        "--save-dir",    (out / "ckpt").string(),
                                        "--save-every",  "3"});
  args.insert(args.end(), extra.begin(), extra.end());
  const testing::CommandOutput r =
      testing::run_command(args, env, std::chrono::seconds(std::max(400, 2 * steps)));
  JobRun run;
  run.exit_code = r.exit_code;
  run.log = r.out + r.err;
  std::ifstream metrics(out / "metrics.jsonl");
  for (std::string line; std::getline(metrics, line);) {
    const nlohmann::json j = nlohmann::json::parse(line);
    if (j["type"] == "step") run.loss[j["step"].get<int64_t>()] = j["loss"].get<double>();
    if (j["type"] == "recovery") run.recoveries.push_back(j);
    if (j["type"] == "power") run.power.push_back(j);
    if (j["type"] == "step") {
      run.degrees_at_end.clear();
      for (const nlohmann::json& replica : j["replicas"])
        run.degrees_at_end.push_back(replica["degree"].get<int>());
    }
    if (j["type"] == "summary") run.summary_steps = j["steps"].get<int64_t>();
  }
  return run;
}

// Every step committed once, each loss on the failure-free trajectory.
inline void expect_same_trajectory(const JobRun& faulty, const JobRun& clean, int steps,
                                   double tolerance) {
  ASSERT_EQ(faulty.exit_code, 0) << faulty.log;
  EXPECT_EQ(faulty.summary_steps, steps);
  ASSERT_EQ(faulty.loss.size(), static_cast<size_t>(steps)) << "a committed step is missing";
  double worst = 0.0;
  for (const auto& [step, loss] : clean.loss) {
    const double rel = std::abs(faulty.loss.at(step) - loss) / std::abs(loss);
    worst = std::max(worst, rel);
    EXPECT_LE(rel, tolerance) << "step " << step;
  }
  std::printf("worst loss deviation from the failure-free run: %.2e over %d steps\n", worst, steps);
}

// `faults` faults (every fifth a SIGSTOP, the others SIGKILLs) at random workers, each repaired
// 3-8 steps later, the next 3-8 steps after that, over `steps` steps (never two faults in one
// replica at once, so no replica drops below --min-tp). The job finishes, never hangs, loses no
// committed step and stays on the failure-free trajectory within the parity tolerance.
inline void run_chaos(const std::string& name, int steps, int fault_count, uint64_t seed) {
  const int kSteps = steps;
  const JobRun clean = train(name + "-clean", kSteps, {});
  ASSERT_EQ(clean.exit_code, 0) << clean.log;
  Rng rng(seed);
  std::vector<std::string> faults;
  int step = 6;
  for (int f = 0; f < fault_count; ++f) {
    const int rank = static_cast<int>(rng.below(12));
    const char* kind = f % 5 == 3 ? "hang" : "kill";
    faults.push_back(std::string(kind) + ":rank=" + std::to_string(rank) +
                     ",at=" + std::to_string(step));
    const int repair_at = step + 3 + static_cast<int>(rng.below(6));
    faults.push_back("repair:rank=" + std::to_string(rank) + ",at=" + std::to_string(repair_at));
    step = repair_at + 3 + static_cast<int>(rng.below(6));
  }
  ASSERT_LT(step, kSteps);
  const JobRun faulty = train(name, kSteps, faults);
  expect_same_trajectory(faulty, clean, kSteps, 1e-3);
  // Every fault was injected and every repair started (the launcher says so), each
  // re-formation is logged once, and the job ends at full degree: every lost device was
  // detected, survived and given back. (A kill during a repair's admission is handled in the
  // same re-formation, so events and faults need not pair one to one.)
  auto count = [&](const std::string& what) {
    size_t n = 0;
    for (size_t at = faulty.log.find(what); at != std::string::npos;
         at = faulty.log.find(what, at + 1)) {
      ++n;
    }
    return n;
  };
  EXPECT_EQ(count("injecting kill") + count("injecting hang"), static_cast<size_t>(fault_count))
      << faulty.log;
  EXPECT_EQ(count("repair: starting a fresh worker"), static_cast<size_t>(fault_count))
      << faulty.log;
  double slowest = 0.0;
  std::set<int> epochs;
  int losses = 0;
  for (const nlohmann::json& r : faulty.recoveries) {
    losses += r["cause"] != "repair" ? 1 : 0;
    EXPECT_TRUE(epochs.insert(r["epoch"].get<int>()).second) << r.dump();
    slowest = std::max(slowest, r["total_s"].get<double>());
  }
  EXPECT_GE(losses, fault_count - fault_count / 5) << faulty.log;
  EXPECT_EQ(faulty.degrees_at_end, (std::vector<int>{4, 4, 4}));
  std::printf("%s: %d faults, %zu reconfigurations, slowest %.2f s\n", name.c_str(), fault_count,
              faulty.recoveries.size(), slowest);
}

}  // namespace ntp::train
