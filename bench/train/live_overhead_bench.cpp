// What live recovery costs a healthy step, measured side by side in one run (docs/perf.md,
// "What live recovery costs a healthy step"): the same failure-free `ntp launch ... ntp train`
// job with live recovery on (the default: each step keeps an undo copy of the optimizer's state,
// so that an update some members applied and others did not can be taken back, and with ZeRO-1
// sends each rank's moments to a DP peer) and off (`--no-live-recovery`), in interleaved pairs. Per
// run: the median step time over steps 3.. (from metrics.jsonl) and the peak resident memory of the
// largest worker (getrusage of the waited-for descendants of a process forked for that run alone).
//
//   build/bench/train/live_overhead_bench [--pairs N] [--steps N] [--width W] [--layers L]
//                                         [--optimizer replicated|sharded]
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "bench_timing.h"
#include "machine_info.h"

namespace {

using ntp::bench::median;

namespace fs = std::filesystem;

struct Run {
  double median_step_s = 0.0;
  long peak_rss_kib = 0;
  bool ok = false;
};

// Runs `command` in a child of its own, so that its peak RSS is the child's descendants' alone.
long run_alone(const std::string& command) {
  int pipe_fd[2];
  if (::pipe(pipe_fd) != 0) return -1;
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::close(pipe_fd[0]);
    long rss = -1;
    if (std::system(command.c_str()) == 0) {
      rusage usage{};
      ::getrusage(RUSAGE_CHILDREN, &usage);
      rss = usage.ru_maxrss;
    }
    (void)!::write(pipe_fd[1], &rss, sizeof rss);
    ::_exit(0);
  }
  ::close(pipe_fd[1]);
  long rss = -1;
  if (::read(pipe_fd[0], &rss, sizeof rss) != static_cast<ssize_t>(sizeof rss)) rss = -1;
  ::close(pipe_fd[0]);
  ::waitpid(pid, nullptr, 0);
  return rss;
}

Run run_job(const std::string& name, const std::string& flags, const fs::path& dir) {
  const fs::path out = dir / name;
  fs::remove_all(out);
  const std::string command = std::string(NTP_BINARY) + " launch --nproc-per-node 12 -- " +
                              NTP_BINARY + " train " + flags + " --quiet --out " + out.string() +
                              " > " + (dir / (name + ".log")).string() + " 2>&1";
  Run r;
  r.peak_rss_kib = run_alone(command);
  if (r.peak_rss_kib < 0) {
    std::fprintf(stderr, "job %s failed: see %s\n", name.c_str(), (dir / (name + ".log")).c_str());
    return r;
  }
  std::vector<double> steps;
  std::ifstream metrics(out / "metrics.jsonl");
  for (std::string line; std::getline(metrics, line);) {
    const nlohmann::json j = nlohmann::json::parse(line);
    if (j["type"] == "step" && j["step"].get<int>() >= 3)
      steps.push_back(j["step_s"].get<double>());
  }
  if (steps.empty()) return r;
  std::sort(steps.begin(), steps.end());
  r.median_step_s = steps[steps.size() / 2];
  r.ok = true;
  return r;
}

}  // namespace

int main(int argc, char** argv) {
  int pairs = 3, steps = 30, width = 256, layers = 4;
  std::string optimizer = "replicated";
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    if (flag == "--optimizer") optimizer = argv[i + 1];
    if (flag == "--pairs") pairs = std::atoi(argv[i + 1]);
    if (flag == "--steps") steps = std::atoi(argv[i + 1]);
    if (flag == "--width") width = std::atoi(argv[i + 1]);
    if (flag == "--layers") layers = std::atoi(argv[i + 1]);
  }
  const fs::path dir = fs::temp_directory_path() / ("ntp-live-bench-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const std::string data = std::string(NTP_SOURCE_DIR) + "/data/";
  const std::string flags =
      "--domains 3 --tp 4 --layers " + std::to_string(layers) + " --heads 8 --width " +
      std::to_string(width) + " --context 64 --batch 12 --micro-batch 4 --steps " +
      std::to_string(steps) + " --train-data " + data + "fortunes_train.bin --val-data " + data +
      "fortunes_val.bin --optimizer " + optimizer;
  std::printf("machine: %s\n", ntp::bench::machine_description().c_str());
  std::printf("job: 3 x 4 workers, %s\n", flags.c_str());
  std::printf(
      "command: build/bench/train/live_overhead_bench --pairs %d --steps %d --width %d "
      "--layers %d --optimizer %s\n\n",
      pairs, steps, width, layers, optimizer.c_str());
  std::printf("%-6s %14s %14s %10s %14s %14s\n", "pair", "on step ms", "off step ms", "ratio",
              "on peak MiB", "off peak MiB");
  std::vector<double> ratios, rss_ratios;
  for (int p = 0; p < pairs; ++p) {
    const Run on = run_job("on" + std::to_string(p), flags, dir);
    const Run off = run_job("off" + std::to_string(p), flags + " --no-live-recovery", dir);
    if (!on.ok || !off.ok) return 1;
    ratios.push_back(on.median_step_s / off.median_step_s);
    rss_ratios.push_back(static_cast<double>(on.peak_rss_kib) /
                         static_cast<double>(off.peak_rss_kib));
    std::printf("%-6d %14.2f %14.2f %10.3f %14.1f %14.1f\n", p, 1e3 * on.median_step_s,
                1e3 * off.median_step_s, ratios.back(),
                static_cast<double>(on.peak_rss_kib) / 1024.0,
                static_cast<double>(off.peak_rss_kib) / 1024.0);
  }
  std::printf("\nmedian step-time ratio on/off: %.3f; median peak-memory ratio: %.3f\n",
              median(ratios), median(rss_ratios));
  fs::remove_all(dir);
  return 0;
}
