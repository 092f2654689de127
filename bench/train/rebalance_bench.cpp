// What a throttled rank costs a 3 x 4 job and what ntp's default mitigation buys back, measured
// side by side in one run (docs/perf.md, "A throttled rank"): the same `ntp launch ... ntp train`
// job healthy; with rank 5's compute throttled to --factor of its speed from step 2 on
// (`--inject throttle:`) and no flag at all (the defaults: speed-weighted rebalancing, batch
// shares by pace, a too-slow rank dropped); the same unmitigated (--no-rebalance --batch-policy
// keep); units moved inside the replica only (--batch-policy keep); and with rank 5's slot
// dropped (--failed 1:1, its replica at TP 3). Per run: the median step time over the last
// --tail steps. The ideals stretch the healthy step's compute by the capacity lost (inside the
// replica: 4 / (3 + F); over the job: 12 / (11 + F); over the job in whole samples: the best
// split's slowest samples / pace over the healthy share), its communication unchanged. Then
// --healthy-runs healthy runs of --healthy-steps with the defaults while --hogs processes spin on
// the host's cores, each of which must move no unit.
//
//   build/bench/train/rebalance_bench [--steps N] [--tail N] [--factor F] [--width W] [--layers L]
//       [--batch B] [--micro-batch M] [--device-gflops G] [--healthy-steps N] [--healthy-runs N]
//       [--hogs N]
//
// --device-gflops (default 0.25) runs every job on emulated devices (`ntp train
// --emulate-device-gflops`): on a host with fewer cores than workers a throttled worker that
// really computes slower hands its core to the others; an emulated device sleeps, as a GPU would
// keep its own time. 0 measures the real compute only.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "bench_timing.h"
#include "cpu_hogs.h"
#include "machine_info.h"

namespace {

using ntp::bench::median;

namespace fs = std::filesystem;

struct Run {
  double median_step_s = 0.0;
  double median_compute_s =
      0.0;  // the slowest replica's compute (the device's: CPU outside waits plus throttle)
  int rebalances = 0;
  bool ok = false;
};

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
  // The last `tail` steps (erased in place: GCC 12 warns, wrongly, on a vector built from a
  // range of another here).
  steps.erase(steps.begin(), steps.end() - tail);
  compute.erase(compute.begin(), compute.end() - tail);
  r.median_step_s = median(steps);
  r.median_compute_s = median(compute);
  r.ok = true;
  return r;
}

// The least stretch of a healthy replica's compute when `batch` samples are split in whole
// samples over three replicas whose paces are 1, `pace` and 1: min over splits of max over
// replicas of samples / pace, over the healthy share batch / 3 (greedy: each sample to the
// replica that would finish it first, as train/batch_split.cpp). Shares follow the pace to the
// sample, so this, not 12/(11+F), is what a batch of a few samples per replica can reach.
double whole_sample_stretch(int batch, double pace) {
  const double paces[3] = {1.0, pace, 1.0};
  int samples[3] = {0, 0, 0};
  for (int left = batch; left > 0; --left) {
    int best = 0;
    for (int d = 1; d < 3; ++d) {
      if ((samples[d] + 1) / paces[d] < (samples[best] + 1) / paces[best]) best = d;
    }
    ++samples[best];
  }
  double slowest = 0.0;
  for (int d = 0; d < 3; ++d) slowest = std::max(slowest, samples[d] / paces[d]);
  return slowest / (batch / 3.0);
}

}  // namespace

struct Options {
  int steps = 80, tail = 40, width = 64, layers = 2, batch = 24, micro_batch = 8,
      healthy_steps = 200, healthy_runs = 5, hogs = 8;
  double factor = 0.5;
  double device_gflops = 0.25;  // --emulate-device-gflops of every job; 0: real compute only
};

bool parse(int argc, char** argv, Options& o) {
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    if (flag == "--steps") o.steps = std::atoi(argv[i + 1]);
    if (flag == "--tail") o.tail = std::atoi(argv[i + 1]);
    if (flag == "--factor") o.factor = std::atof(argv[i + 1]);
    if (flag == "--width") o.width = std::atoi(argv[i + 1]);
    if (flag == "--layers") o.layers = std::atoi(argv[i + 1]);
    if (flag == "--batch") o.batch = std::atoi(argv[i + 1]);
    if (flag == "--micro-batch") o.micro_batch = std::atoi(argv[i + 1]);
    if (flag == "--healthy-steps") o.healthy_steps = std::atoi(argv[i + 1]);
    if (flag == "--healthy-runs") o.healthy_runs = std::atoi(argv[i + 1]);
    if (flag == "--hogs") o.hogs = std::atoi(argv[i + 1]);
    if (flag == "--device-gflops") o.device_gflops = std::atof(argv[i + 1]);
  }
  return o.factor > 0.0 && o.factor < 1.0 && o.tail >= 3 && o.steps >= o.tail + 10 &&
         o.device_gflops >= 0.0 && o.healthy_steps >= 0 && o.healthy_runs >= 0 && o.hogs >= 0;
}

int main(int argc, char** argv) {
  Options o;
  if (!parse(argc, argv, o)) {
    std::fprintf(stderr,
                 "need 0 < --factor < 1, --tail >= 3, --steps >= --tail + 10, --device-gflops >= 0 "
                 "and --healthy-steps, --healthy-runs, --hogs >= 0\n");
    return 2;
  }
  const fs::path dir =
      fs::temp_directory_path() / ("ntp-rebalance-bench-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const std::string data = std::string(NTP_SOURCE_DIR) + "/data/";
  char device[64];
  std::snprintf(device, sizeof device, " --emulate-device-gflops %g", o.device_gflops);
  const std::string base = "--domains 3 --tp 4 --layers " + std::to_string(o.layers) +
                           " --heads 8 --width " + std::to_string(o.width) +
                           " --context 64 --batch " + std::to_string(o.batch) + " --micro-batch " +
                           std::to_string(o.micro_batch) + " --train-data " + data +
                           "fortunes_train.bin --val-data " + data + "fortunes_val.bin" +
                           (o.device_gflops > 0.0 ? device : "");
  const std::string flags = base + " --steps " + std::to_string(o.steps);
  char throttle[96];
  std::snprintf(throttle, sizeof throttle, "--inject throttle:rank=5,factor=%g,at=2", o.factor);
  std::printf("machine: %s\n", ntp::bench::machine_description().c_str());
  std::printf("job: 3 x 4 workers, %s\n", flags.c_str());
  std::printf("throttle: %s; medians over the last %d steps\n", throttle, o.tail);
  std::printf(
      "command: build/bench/train/rebalance_bench --steps %d --tail %d --factor %g --width %d "
      "--layers %d --batch %d --micro-batch %d --device-gflops %g --healthy-steps %d "
      "--healthy-runs %d --hogs %d\n\n",
      o.steps, o.tail, o.factor, o.width, o.layers, o.batch, o.micro_batch, o.device_gflops,
      o.healthy_steps, o.healthy_runs, o.hogs);

  const Run healthy = run_job("healthy", "", flags, dir, o.tail);
  const Run defaults = run_job("defaults", throttle, flags, dir, o.tail);
  const Run throttled =
      run_job("throttled", throttle, flags + " --no-rebalance --batch-policy keep", dir, o.tail);
  const Run weighted = run_job("weighted", throttle, flags + " --batch-policy keep", dir, o.tail);
  const Run dropped = run_job("dropped", "", flags + " --failed 1:1", dir, o.tail);
  if (!healthy.ok || !defaults.ok || !throttled.ok || !weighted.ok || !dropped.ok) return 1;
  // The ideals stretch the healthy step's compute by the capacity lost: inside the replica
  // (4 / (3 + F)) when only its units move, over the whole job (12 / (11 + F)) when shares follow.
  const double in_replica = 4.0 / (3.0 + o.factor), in_job = 12.0 / (11.0 + o.factor);
  const double ideal = healthy.median_step_s + healthy.median_compute_s * (in_job - 1.0);
  const double whole = whole_sample_stretch(o.batch, (3.0 + o.factor) / 4.0);

  std::printf("%-48s %10s %12s %12s %10s\n", "run", "step ms", "compute ms", "vs healthy",
              "vs ideal");
  auto row = [&](const char* name, double step_s, double compute_s) {
    std::printf("%-48s %10.1f %12.1f %12.3f %10.3f\n", name, 1e3 * step_s, 1e3 * compute_s,
                step_s / healthy.median_step_s, step_s / ideal);
  };
  row("healthy (no flags)", healthy.median_step_s, healthy.median_compute_s);
  row("throttled, no flags (the defaults)", defaults.median_step_s, defaults.median_compute_s);
  row("throttled, --no-rebalance --batch-policy keep", throttled.median_step_s,
      throttled.median_compute_s);
  row("throttled, units only (--batch-policy keep)", weighted.median_step_s,
      weighted.median_compute_s);
  row("rank dropped (--failed 1:1)", dropped.median_step_s, dropped.median_compute_s);
  row("ideal, units only (compute x 4/(3+F))",
      healthy.median_step_s + healthy.median_compute_s * (in_replica - 1.0),
      healthy.median_compute_s * in_replica);
  row("ideal, shares follow (compute x 12/(11+F))", ideal, healthy.median_compute_s * in_job);
  char whole_name[64];
  std::snprintf(whole_name, sizeof whole_name, "ideal, whole samples (compute x %.3f)", whole);
  row(whole_name, healthy.median_step_s + healthy.median_compute_s * (whole - 1.0),
      healthy.median_compute_s * whole);
  std::printf("\nrebalances: healthy %d, no flags %d, unmitigated %d, units only %d\n",
              healthy.rebalances, defaults.rebalances, throttled.rebalances, weighted.rebalances);
  int moved = 0;
  for (int run = 0; run < o.healthy_runs; ++run) {
    const ntp::testing::CpuHogs hogs(o.hogs);
    const Run quiet = run_job("healthy-long-" + std::to_string(run), "",
                              base + " --steps " + std::to_string(o.healthy_steps), dir, 3);
    std::printf("healthy run %d of %d steps, no flags, %d busy processes: %d rebalances (%s)\n",
                run + 1, o.healthy_steps, o.hogs, quiet.rebalances,
                quiet.ok ? "finished" : "FAILED");
    std::fflush(stdout);
    if (!quiet.ok) return 1;
    moved += quiet.rebalances;
  }
  if (o.healthy_runs > 0) {
    std::printf("healthy runs under load: %d rebalances in %d runs\n", moved, o.healthy_runs);
  }
  fs::remove_all(dir);
  return 0;
}
