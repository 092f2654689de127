// Where the time of a mixed-degree training job goes, measured side by side in one run on real
// `ntp launch ... ntp train` jobs (docs/perf.md, "Training jobs"):
//   (a) exposed sync time of a healthy rank (its wait from the end of backward to the optimizer),
//       mixed {4,3,2} job / uniform 3 x 4 job, per strategy;
//   (b) the share of the sync that ran while backward was still computing;
//   (c) sync bytes of the busiest healthy rank per step, mixed / uniform, per strategy;
//   (d) balance of the degraded replicas (ideal / largest per-rank units, worst space);
//   and the whole job's tokens/s next to one process training the same global batch.
// Every figure is the mean over steps 3.. of the run; each job runs `--steps` steps.
//
//   build/bench/train/train_job_bench [--steps N] [--width W]
#include <unistd.h>
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

struct JobFigures {
  double healthy_wait_s = 0, healthy_overlap = 0, healthy_bytes = 0, tokens_per_s = 0;
  std::vector<double> balance;
  bool ok = false;
};

JobFigures run_job(const std::string& name, int workers, const std::string& flags,
                   const fs::path& dir) {
  const fs::path out = dir / name;
  const std::string command = std::string(NTP_BINARY) + " launch --nproc-per-node " +
                              std::to_string(workers) + " -- " + NTP_BINARY + " train " + flags +
                              " --quiet --out " + out.string() + " > " +
                              (dir / (name + ".log")).string() + " 2>&1";
  JobFigures f;
  if (std::system(command.c_str()) != 0) {
    std::fprintf(stderr, "job %s failed: see %s\n", name.c_str(), (dir / (name + ".log")).c_str());
    return f;
  }
  std::ifstream metrics(out / "metrics.jsonl");
  int n = 0;
  for (std::string line; std::getline(metrics, line);) {
    const nlohmann::json j = nlohmann::json::parse(line);
    if (j["type"] == "start") f.balance = j["balance"].get<std::vector<double>>();
    if (j["type"] != "step" || j["step"].get<int>() < 2) continue;
    const nlohmann::json& healthy = j["replicas"][0];
    f.healthy_wait_s += healthy["sync_wait_s"].get<double>();
    f.healthy_overlap += healthy["sync_overlap"].get<double>();
    f.healthy_bytes += healthy["sync_bytes_max_rank"].get<double>();
    f.tokens_per_s += j["tokens_per_s"].get<double>();
    ++n;
  }
  if (n == 0) return f;
  f.healthy_wait_s /= n, f.healthy_overlap /= n, f.healthy_bytes /= n, f.tokens_per_s /= n;
  f.ok = true;
  return f;
}

}  // namespace

int main(int argc, char** argv) {
  int steps = 30, width = 128;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    if (flag == "--steps") steps = std::atoi(argv[i + 1]);
    if (flag == "--width") width = std::atoi(argv[i + 1]);
  }
  const fs::path dir =
      fs::temp_directory_path() / ("ntp-train-bench-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const std::string data = std::string(NTP_SOURCE_DIR) + "/data/";
  const std::string model = "--layers 2 --heads 8 --width " + std::to_string(width) +
                            " --context 64 --ffn-unit 8 --batch 12 --micro-batch 4 --steps " +
                            std::to_string(steps) + " --bucket-kb 64 --train-data " + data +
                            "fortunes_train.bin --val-data " + data + "fortunes_val.bin";
  std::printf("machine: %s\n", ntp::bench::machine_description().c_str());
  std::printf(
      "model: 2 layers, 8 heads, width %d, context 64, batch 12 x 64 tokens, micro-batch 4, "
      "64 KiB buckets, %d steps per job (mean of steps 3..)\n",
      width, steps);
  std::printf("command: build/bench/train/train_job_bench --steps %d --width %d\n\n", steps, width);

  const JobFigures single = run_job("single", 1, "--domains 1 --tp 1 " + model, dir);
  std::printf("%-8s %-12s %12s %10s %12s %12s %10s %8s\n", "strategy", "job", "wait healthy",
              "overlap", "bytes/step", "tokens/s", "vs 1 proc", "balance");
  for (const char* strategy : {"fold", "native"}) {
    const std::string common = model + " --strategy " + strategy;
    const JobFigures uniform =
        run_job(std::string("uniform-") + strategy, 12, "--domains 3 --tp 4 " + common, dir);
    const JobFigures mixed = run_job(std::string("mixed-") + strategy, 12,
                                     "--domains 3 --tp 4 --failed 1:3,2:2,2:3 " + common, dir);
    if (!uniform.ok || !mixed.ok || !single.ok) return 1;
    for (const auto& [label, f] : {std::pair{"3x4", &uniform}, std::pair{"{4,3,2}", &mixed}}) {
      std::printf("%-8s %-12s %10.1f ms %10.2f %12.0f %12.0f %10.2f %8.2f\n", strategy, label,
                  f->healthy_wait_s * 1e3, f->healthy_overlap, f->healthy_bytes, f->tokens_per_s,
                  f->tokens_per_s / single.tokens_per_s,
                  *std::min_element(f->balance.begin(), f->balance.end()));
    }
    std::printf(
        "%-8s ratios mixed/uniform: exposed sync wait of a healthy rank %.2f, its sync "
        "bytes %.2f\n",
        strategy, mixed.healthy_wait_s / uniform.healthy_wait_s,
        mixed.healthy_bytes / uniform.healthy_bytes);
  }
  std::printf("\none process, same global batch: %.0f tokens/s\n", single.tokens_per_s);
  fs::remove_all(dir);
  return 0;
}
