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
#include "json_lines.h"

namespace ntp::train {

// A degraded layout history differs from the failure-free run's only in the order of float32
// additions (partial sums over 3 ranks instead of 4): the runs show 1e-9 to 6e-8 relative on the
// loss over 10 to 200 steps. 1e-6 leaves room for other hosts and schedules, while one update lost
// or applied twice moves the loss by about 1e-3 relative at these learning rates: a thousand
// times more.
inline constexpr double kDegradedTolerance = 1e-6;

struct JobRun {
  std::filesystem::path out;  // the job's --out folder (metrics, event logs)
  int exit_code = -1;
  std::string log;
  std::map<int64_t, double> loss;  // step -> loss of its last (committed) execution
  std::vector<nlohmann::json> recoveries;
  int64_t summary_steps = -1;
  std::vector<int> degrees_at_end;
  std::vector<nlohmann::json> power;  // power settings the leader asked for
};

// The job's metrics lines of one type ("rebalanced", "recovery", ...), in order.
inline std::vector<nlohmann::json> lines_of(const JobRun& run, const std::string& type) {
  std::vector<nlohmann::json> out;
  for (const nlohmann::json& j : ntp::testing::read_json_lines(run.out / "metrics.jsonl")) {
    if (j["type"] == type) out.push_back(j);
  }
  return out;
}

// One job: 3 x 4 workers, `steps` steps, `faults` as `ntp launch --inject` specs, `extra` more
// `ntp train` flags (a --save-dir, --timeout-ms or --batch there replaces the default <out>/ckpt,
// 2000, or --batch 12 --micro-batch 2),
// `model` the model's flags (test_jobs::small_model()), `launch_flags` more `ntp launch` flags.
inline JobRun train(const std::string& name, int steps, const std::vector<std::string>& faults,
                    const std::vector<std::string>& env = {},
                    const std::vector<std::string>& extra = {},
                    const std::vector<std::string>& model = test_jobs::small_model(),
                    const std::vector<std::string>& launch_flags = {}) {
  const std::filesystem::path out = test_jobs::scratch_dir() / name;
  std::vector<std::string> launch = launch_flags;
  for (const std::string& f : faults) {
    launch.push_back("--inject");
    launch.push_back(f);
  }
  std::vector<std::string> args =
      test_jobs::small_job(12, launch,
                           {"--domains", "3", "--tp", "4", "--steps", std::to_string(steps),
                            "--warmup", "5", "--out", out.string(), "--save-every", "3"},
                           model);
  args.insert(args.end(), extra.begin(), extra.end());
  auto absent = [&extra](const char* flag) {
    return std::find(extra.begin(), extra.end(), flag) == extra.end();
  };
  if (absent("--batch")) args.insert(args.end(), {"--batch", "12", "--micro-batch", "2"});
  if (absent("--save-dir")) args.insert(args.end(), {"--save-dir", (out / "ckpt").string()});
  if (absent("--timeout-ms")) args.insert(args.end(), {"--timeout-ms", "2000"});
  const testing::CommandOutput r =
      testing::run_command(args, env, std::chrono::seconds(std::max(400, 2 * steps)));
  JobRun run;
  run.out = out;
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

// Each worker whose process finished the job (its event log ends its last lineage, from the start
// or its join or rejoin, with "finished") applied the update of every step from the one it joined
// at to the last exactly once, net of the updates it took back (`applied`, `rolled_back` lines, and
// `restored` from a checkpoint, which drops every later update). Returns
// how many workers it checked.
inline int expect_each_update_applied_once(const std::filesystem::path& out, int64_t steps) {
  int checked = 0;
  for (int rank = 0; rank < 16; ++rank) {
    const std::filesystem::path file = out / "events" / ("rank_" + std::to_string(rank) + ".jsonl");
    if (!std::filesystem::exists(file)) continue;
    std::map<int64_t, int> net;
    int64_t from = 0;
    bool finished = false;
    std::ifstream in(file);
    for (std::string line; std::getline(in, line);) {
      const nlohmann::json e = nlohmann::json::parse(line);
      const std::string what = e["event"].get<std::string>();
      // A new process of this slot, or one whose replica left the job and came back holding
      // nothing (it dropped its state when parked): its own lineage starts here.
      if (what == "joined" || what == "rejoined") {
        net.clear();
        from = e["step"].get<int64_t>();
        finished = false;
      }
      if (what == "finished") finished = true;
      if (what == "applied") ++net[e["step"].get<int64_t>()];
      if (what == "rolled_back") --net[e["step"].get<int64_t>()];
      if (what == "restored") {  // state loaded from the checkpoint of that step: later ones gone
        const int64_t at = e["step"].get<int64_t>();
        net.erase(net.lower_bound(at), net.end());
        if (net.empty()) from = at;  // a resume: the checkpoint holds the updates before it
      }
    }
    if (!finished) continue;
    ++checked;
    for (int64_t s = from; s < steps; ++s) {
      EXPECT_EQ(net[s], 1) << out << ": rank " << rank << ", update of step " << s;
    }
    for (const auto& [s, n] : net) {
      if (s < from || s >= steps) {
        EXPECT_EQ(n, 0) << out << ": rank " << rank << ", step " << s;
      }
    }
  }
  return checked;
}

// Every step's update applied exactly once on every worker that finished, each loss on the
// failure-free trajectory.
inline void expect_same_trajectory(const JobRun& faulty, const JobRun& clean, int steps,
                                   double tolerance) {
  ASSERT_EQ(faulty.exit_code, 0) << faulty.log;
  EXPECT_EQ(faulty.summary_steps, steps);
  ASSERT_EQ(faulty.loss.size(), static_cast<size_t>(steps)) << "a committed step is missing";
  if (!faulty.out.empty()) {  // one job (a replay of stretches has no single event log)
    EXPECT_GT(expect_each_update_applied_once(faulty.out, steps), 0) << faulty.log;
  }
  double worst = 0.0;
  for (const auto& [step, loss] : clean.loss) {
    const double rel = std::abs(faulty.loss.at(step) - loss) / std::abs(loss);
    worst = std::max(worst, rel);
    EXPECT_LE(rel, tolerance) << "step " << step;
  }
  std::printf("worst loss deviation from the failure-free run: %.2e over %d steps\n", worst, steps);
}

// The weights a job dumped with --dump-dir (every rank's file: the logical tensors, NaN where
// that rank holds nothing), merged into one flat vector.
inline std::vector<float> dumped_weights(const std::filesystem::path& dir) {
  std::vector<float> merged;
  for (int rank = 0; rank < 12; ++rank) {
    std::ifstream in(dir / ("weights_rank" + std::to_string(rank) + ".bin"), std::ios::binary);
    std::vector<float> mine;
    for (float x; in.read(reinterpret_cast<char*>(&x), sizeof x);) mine.push_back(x);
    if (mine.empty()) continue;
    if (merged.empty()) merged.assign(mine.size(), NAN);
    EXPECT_EQ(mine.size(), merged.size());
    for (size_t i = 0; i < std::min(mine.size(), merged.size()); ++i) {
      if (std::isnan(merged[i])) merged[i] = mine[i];
    }
  }
  return merged;
}

// Replays the layout history of `faulty` without faults: one job per stretch of steps that ran at
// one layout (--failed naming its inactive slots), each resuming from the checkpoint the previous
// stretch wrote at its end (--stop-after). The losses of every step; the last stretch dumps its
// weights into `dump`.
inline JobRun replay_layouts(const std::string& name, int steps, const JobRun& faulty,
                             const std::filesystem::path& dump) {
  std::vector<std::pair<int64_t, std::string>> stretches{{0, ""}};  // first step, --failed
  for (const nlohmann::json& r : faulty.recoveries) {
    const int64_t at = r["step"].get<int64_t>();
    if (stretches.back().first == at) stretches.pop_back();  // a layout that ran no step
    stretches.emplace_back(at, r["failed"].get<std::string>());
  }
  const std::filesystem::path ckpt = test_jobs::scratch_dir() / name / "ckpt";
  JobRun replay;
  replay.exit_code = 0;
  for (size_t i = 0; i < stretches.size(); ++i) {
    const int64_t end = i + 1 < stretches.size() ? stretches[i + 1].first : steps;
    std::vector<std::string> extra = {"--save-dir",   ckpt.string(),
                                      "--resume",     "auto",
                                      "--stop-after", std::to_string(end - stretches[i].first)};
    if (!stretches[i].second.empty()) extra.insert(extra.end(), {"--failed", stretches[i].second});
    if (i + 1 == stretches.size()) extra.insert(extra.end(), {"--dump-dir", dump.string()});
    const JobRun part = train(name + "/" + std::to_string(i), steps, {}, {}, extra);
    if (part.exit_code != 0) {
      replay.exit_code = part.exit_code;
      replay.log = part.log;
      return replay;
    }
    for (const auto& [step, loss] : part.loss) replay.loss[step] = loss;
    replay.summary_steps = part.summary_steps;
  }
  return replay;
}

// `faults` faults (every fifth a SIGSTOP, the others SIGKILLs) at random workers, each repaired
// 3-8 steps later, the next 3-8 steps after that, over `steps` steps (never two faults in one
// replica at once, so no replica drops below --min-tp); every fourth with a second fault inside
// its re-formation. The job finishes, never hangs, loses no
// committed step and stays on the failure-free trajectory within the parity tolerance.
// `weight_tolerance`: the final parameters' distance from the replay of the layout history,
// relative to what training changed (rounding differences between layouts grow with the steps).
inline void run_chaos(const std::string& name, int steps, int fault_count, uint64_t seed,
                      double loss_tolerance, double weight_tolerance) {
  const int kSteps = steps;
  const std::filesystem::path dumps = test_jobs::scratch_dir() / (name + "-weights");
  const JobRun clean =
      train(name + "-clean", kSteps, {}, {}, {"--dump-dir", (dumps / "clean").string()});
  ASSERT_EQ(clean.exit_code, 0) << clean.log;
  Rng rng(seed);
  std::vector<std::string> faults;
  // Every fourth fault has a second one inside the re-formation it causes: a worker of another
  // replica dies at a re-formation fault point (train/fault_point.h) and is repaired 2 steps on.
  std::string nested_points;
  int nested = 0;
  const char* const phases[] = {"reform_build", "reform_reshard", "reform_agreed"};
  int step = 6;
  for (int f = 0; f < fault_count; ++f) {
    const int rank = static_cast<int>(rng.below(12));
    const char* kind = f % 5 == 3 ? "hang" : "kill";
    faults.push_back(std::string(kind) + ":rank=" + std::to_string(rank) +
                     ",at=" + std::to_string(step));
    if (f % 4 == 1) {
      const int second = (rank + 4) % 12;  // the next replica's slot of the same index
      nested_points += std::string(nested_points.empty() ? "" : ",") + phases[nested % 3] + ":" +
                       std::to_string(step) + ":" + std::to_string(second);
      faults.push_back("repair:rank=" + std::to_string(second) + ",at=" + std::to_string(step + 2));
      ++nested;
    }
    const int repair_at = step + 3 + static_cast<int>(rng.below(6));
    faults.push_back("repair:rank=" + std::to_string(rank) + ",at=" + std::to_string(repair_at));
    step = repair_at + 3 + static_cast<int>(rng.below(6));
  }
  ASSERT_LT(step, kSteps);
  const JobRun faulty = train(name, kSteps, faults, {"NTP_FAULT_POINT=" + nested_points},
                              {"--dump-dir", (dumps / "faulty").string()});
  expect_same_trajectory(faulty, clean, kSteps, loss_tolerance);
  // The same layout history replayed without faults (each stretch resumed from a checkpoint):
  // the same losses and the same final parameters within the parity tolerance. (The replay plans
  // each layout afresh while the live run kept units in place, so the two differ in the order of
  // float additions only.)
  const JobRun replay = replay_layouts(name + "-replay", kSteps, faulty, dumps / "replay");
  ASSERT_EQ(replay.exit_code, 0) << replay.log;
  expect_same_trajectory(replay, faulty, kSteps, loss_tolerance);
  // The initial weights: one step at learning rate 1e-12 moves no float32 weight by a rounding
  // step worth counting (weight decay scales with the rate too).
  const JobRun initial =
      train(name + "-init", 1, {}, {},
            {"--lr", "1e-12", "--min-lr", "0", "--dump-dir", (dumps / "init").string()});
  ASSERT_EQ(initial.exit_code, 0) << initial.log;
  const std::vector<float> live = dumped_weights(dumps / "faulty");
  const std::vector<float> replayed = dumped_weights(dumps / "replay");
  const std::vector<float> failure_free = dumped_weights(dumps / "clean");
  const std::vector<float> start = dumped_weights(dumps / "init");
  ASSERT_FALSE(live.empty());
  ASSERT_EQ(live.size(), replayed.size());
  ASSERT_EQ(live.size(), failure_free.size());
  ASSERT_EQ(live.size(), start.size());
  // Distance from the replay, relative to what training changed (as the parity tests measure
  // updates, limit 1e-3).
  auto from_replay = [&](const std::vector<float>& w) {
    double diff = 0.0, change = 0.0;
    for (size_t i = 0; i < w.size(); ++i) {
      EXPECT_FALSE(std::isnan(w[i]) || std::isnan(replayed[i])) << "element " << i;
      const double d = static_cast<double>(w[i]) - replayed[i];
      const double c = static_cast<double>(replayed[i]) - start[i];
      diff += d * d;
      change += c * c;
    }
    return std::sqrt(diff / change);
  };
  const double rel = from_replay(live);
  // For scale: the failure-free run (the initial layout throughout) shows how far the layouts
  // alone move the weights over this run; the bound is fixed by the caller, not by this run.
  const double layouts_alone = from_replay(failure_free);
  std::printf(
      "%s: final parameters vs the replay of its %zu layouts: %.2e of the change from the "
      "initial weights (the failure-free run: %.2e)\n",
      name.c_str(), faulty.recoveries.size() + 1, rel, layouts_alone);
  EXPECT_LE(rel, weight_tolerance);
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
  EXPECT_EQ(count("ntp fault point: SIGKILL"), static_cast<size_t>(nested)) << faulty.log;
  EXPECT_EQ(count("repair: starting a fresh worker"), static_cast<size_t>(fault_count + nested))
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
  EXPECT_EQ(expect_each_update_applied_once(faulty.out, kSteps), 12) << faulty.log;
  EXPECT_EQ(faulty.degrees_at_end, (std::vector<int>{4, 4, 4}));
  std::printf("%s: %d faults, %zu reconfigurations, slowest %.2f s\n", name.c_str(), fault_count,
              faulty.recoveries.size(), slowest);
}

}  // namespace ntp::train
