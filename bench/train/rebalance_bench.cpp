// What a throttled rank costs a 3 x 4 job and what speed-weighted rebalancing buys back, measured
// side by side in one run (docs/perf.md, "A throttled rank"): the same `ntp launch ... ntp train`
// job healthy; with rank 5's compute throttled to --factor of its speed from step 2 on
// (`--inject throttle:`) and nothing done; the same with --rebalance; and with rank 5's slot
// dropped (--failed 1:1, its replica at TP 3). Per run: the median step time over the last
// --tail steps (after the rebalance has settled). The ideal for the throttled job is the healthy
// step with the throttled replica's compute stretched by its lost capacity (TP 4 with one rank at
// F: 4 / (3 + F) times as long), its communication unchanged.
//
//   build/bench/train/rebalance_bench [--steps N] [--tail N] [--factor F] [--width W] [--layers L]
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "machine_info.h"

namespace {

namespace fs = std::filesystem;

struct Run {
  double median_step_s = 0.0;
  double median_compute_s = 0.0;  // the slowest replica's compute (forward + backward less waits)
  int rebalances = 0;
  bool ok = false;
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0.0 : v[v.size() / 2];
}

Run run_job(const std::string& name, const std::string& launch, const std::string& flags,
            const fs::path& dir, int tail) {
  const fs::path out = dir / name;
  fs::remove_all(out);
  const std::string log = (dir / (name + ".log")).string();
  const std::string command = std::string(NTP_BINARY) + " launch --nproc-per-node 12 " + launch +
                              " -- " + NTP_BINARY + " train " + flags + " --quiet --out " +
                              out.string() + " > " + log + " 2>&1";
  Run r;
  if (std::system(command.c_str()) != 0) {
    std::fprintf(stderr, "job %s failed: see %s\n", name.c_str(), log.c_str());
    return r;
  }
  std::vector<double> steps, compute;
  std::ifstream metrics(out / "metrics.jsonl");
  for (std::string line; std::getline(metrics, line);) {
    const nlohmann::json j = nlohmann::json::parse(line);
    if (j["type"] == "rebalanced") ++r.rebalances;
    if (j["type"] != "step") continue;
    steps.push_back(j["step_s"].get<double>());
    double slowest = 0.0;
    for (const nlohmann::json& replica : j["replicas"]) {
      slowest = std::max(slowest, replica["compute_s"].get<double>());
    }
    compute.push_back(slowest);
  }
  if (static_cast<int>(steps.size()) < tail) return r;
  r.median_step_s = median(std::vector<double>(steps.end() - tail, steps.end()));
  r.median_compute_s = median(std::vector<double>(compute.end() - tail, compute.end()));
  r.ok = true;
  return r;
}

}  // namespace

int main(int argc, char** argv) {
  int steps = 60, tail = 20, width = 256, layers = 2;
  double factor = 0.5;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    if (flag == "--steps") steps = std::atoi(argv[i + 1]);
    if (flag == "--tail") tail = std::atoi(argv[i + 1]);
    if (flag == "--factor") factor = std::atof(argv[i + 1]);
    if (flag == "--width") width = std::atoi(argv[i + 1]);
    if (flag == "--layers") layers = std::atoi(argv[i + 1]);
  }
  if (!(factor > 0.0 && factor < 1.0) || tail < 3 || steps < tail + 10) {
    std::fprintf(stderr, "need 0 < --factor < 1, --tail >= 3 and --steps >= --tail + 10\n");
    return 2;
  }
  const fs::path dir =
      fs::temp_directory_path() / ("ntp-rebalance-bench-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const std::string data = std::string(NTP_SOURCE_DIR) + "/data/";
  const std::string flags = "--domains 3 --tp 4 --layers " + std::to_string(layers) +
                            " --heads 8 --width " + std::to_string(width) +
                            " --context 64 --batch 12 --micro-batch 4 --steps " +
                            std::to_string(steps) + " --train-data " + data +
                            "fortunes_train.bin --val-data " + data + "fortunes_val.bin";
  char throttle[96];
  std::snprintf(throttle, sizeof throttle, "--inject throttle:rank=5,factor=%g,at=2", factor);
  std::printf("machine: %s\n", ntp::bench::machine_description().c_str());
  std::printf("job: 3 x 4 workers, %s\n", flags.c_str());
  std::printf("throttle: %s; medians over the last %d steps\n", throttle, tail);
  std::printf(
      "command: build/bench/train/rebalance_bench --steps %d --tail %d --factor %g "
      "--width %d --layers %d\n\n",
      steps, tail, factor, width, layers);

  const Run healthy = run_job("healthy", "", flags, dir, tail);
  const Run throttled = run_job("throttled", throttle, flags, dir, tail);
  const Run rebalanced = run_job("rebalanced", throttle, flags + " --rebalance", dir, tail);
  const Run dropped = run_job("dropped", "", flags + " --failed 1:1", dir, tail);
  if (!healthy.ok || !throttled.ok || !rebalanced.ok || !dropped.ok) return 1;
  const double stretch = 4.0 / (3.0 + factor);
  const double ideal = healthy.median_step_s + healthy.median_compute_s * (stretch - 1.0);

  std::printf("%-34s %12s %14s %12s %12s\n", "run", "step ms", "compute ms", "vs healthy",
              "vs ideal");
  auto row = [&](const char* name, double step_s, double compute_s) {
    std::printf("%-34s %12.1f %14.1f %12.3f %12.3f\n", name, 1e3 * step_s, 1e3 * compute_s,
                step_s / healthy.median_step_s, step_s / ideal);
  };
  row("healthy", healthy.median_step_s, healthy.median_compute_s);
  row("throttled, unmitigated", throttled.median_step_s, throttled.median_compute_s);
  row("throttled, --rebalance", rebalanced.median_step_s, rebalanced.median_compute_s);
  row("rank dropped (--failed 1:1)", dropped.median_step_s, dropped.median_compute_s);
  row("ideal (compute x 4/(3+F))", ideal, healthy.median_compute_s * stretch);
  std::printf("\nrebalances: healthy %d, throttled %d, --rebalance %d\n", healthy.rebalances,
              throttled.rebalances, rebalanced.rebalances);
  fs::remove_all(dir);
  return 0;
}
