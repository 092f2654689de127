// Live recovery against checkpoint-restart, side by side in one run (docs/perf.md, "Recovery"):
// the same 3 x 4 job, the same fault (worker 6 SIGKILLs itself in the backward pass of step K,
// NTP_FAULT_POINT), recovering live with the flat protocol, live with the domain hierarchy
// (`--control-plane hierarchy` under `ntp launch --domain-size 4`), and under `ntp launch
// --restart-on-failure` from its latest checkpoint (--no-live-recovery --resume auto), for each
// checkpoint interval given
// (the fault lands in the middle of an interval: the expected case). For each it reports the time
// from the fault to the moment step K is committed, broken down:
//   live:    detection (fault -> the leader's re-formation starts), agreement, communicator
//            rebuild, reshard, and the redone step;
//   restart: fault -> the restarted job's start line (detection, stopping the survivors, new
//            processes, rendezvous, model set-up), checkpoint load, recomputed steps;
// the work lost (committed steps computed again), and the reshard's throughput next to the
// loopback link's bandwidth measured here (a 2-process alltoallv through the same communicator).
//
//   build/bench/train/recovery_bench [--width W] [--layers L] [--save-every S1,S2,...]
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "comm/gloo_communicator.h"
#include "comm/store.h"
#include "json_lines.h"
#include "machine_info.h"

namespace {

namespace fs = std::filesystem;

struct Options {
  int width = 256, layers = 4, steps = 0, fault_step = 0, save_every = 0;
};

// How the job recovers: live under either control plane, or by a restart from the checkpoint.
enum class Mode { kLive, kHierarchy, kRestart };

const char* mode_name(Mode mode) {
  return mode == Mode::kLive ? "live" : mode == Mode::kHierarchy ? "hierarchy" : "restart";
}

struct Run {
  bool ok = false;
  double fault_time = 0;                              // Unix seconds, from the fault point's line
  double step_s = 0;                                  // mean step time before the fault
  double fault_to_commit_s = 0;                       // fault -> step K committed again
  std::vector<std::pair<std::string, double>> parts;  // the breakdown, in order
  int64_t steps_redone = 0;
  int64_t reshard_bytes = 0, busiest_rank_bytes = 0;
  double reshard_s = 0;
};

std::optional<double> fault_time(const fs::path& log) {
  std::ifstream in(log);
  const std::string tag = "ntp fault point: SIGKILL";
  for (std::string line; std::getline(in, line);) {
    const size_t at = line.find(tag);
    if (at == std::string::npos) continue;
    const size_t t = line.rfind(" at ");
    if (t != std::string::npos) return std::strtod(line.c_str() + t + 4, nullptr);
  }
  return std::nullopt;
}

Run run_job(const Options& o, Mode mode, const fs::path& dir) {
  const bool live = mode != Mode::kRestart;
  const std::string name = mode_name(mode);
  const bool hierarchy = mode == Mode::kHierarchy;
  const fs::path out = dir / name;
  fs::create_directories(dir);
  const std::string data = std::string(NTP_SOURCE_DIR) + "/data/";
  const std::string command =
      "NTP_FAULT_POINT=backward:" + std::to_string(o.fault_step) + ":6 " + NTP_BINARY +
      " launch --nproc-per-node 12 " + (live ? "" : "--restart-on-failure ") +
      (hierarchy ? "--domain-size 4 " : "") + "-- " + NTP_BINARY +
      " train --domains 3 --tp 4 --layers " + std::to_string(o.layers) + " --heads 8 --width " +
      std::to_string(o.width) + " --context 64 --ffn-unit 8 --batch 12 --micro-batch 4 --steps " +
      std::to_string(o.steps) + " --eval-every 0 --timeout-ms 5000 --train-data " + data +
      "fortunes_train.bin --val-data " + data + "fortunes_val.bin --save-dir " +
      (out / "ckpt").string() + " --save-every " + std::to_string(o.save_every) +
      (live ? "" : " --no-live-recovery --resume auto") +
      (hierarchy ? " --control-plane hierarchy" : "") + " --quiet --out " + out.string() + " > " +
      (dir / (name + ".log")).string() + " 2>&1";
  Run r;
  // The launcher's exit code reports the killed worker; the job's own summary says whether it
  // trained every step.
  (void)std::system(command.c_str());
  const std::optional<double> fault = fault_time(dir / (name + ".log"));
  if (!fault) {
    std::fprintf(stderr, "%s: the fault point did not fire\n", name.c_str());
    return r;
  }
  r.fault_time = *fault;
  const std::vector<nlohmann::json> lines = ntp::testing::read_json_lines(out / "metrics.jsonl");
  double before = 0;
  int n = 0;
  std::optional<double> commit, start, resume, recovery;
  int64_t resumed_step = -1;
  nlohmann::json event;
  for (const nlohmann::json& j : lines) {
    const double t = j.value("time", 0.0);
    if (j["type"] == "step" && t < r.fault_time && j["step"].get<int>() >= 2) {
      before += j["step_s"].get<double>();
      ++n;
    }
    if (t <= r.fault_time) continue;
    if (j["type"] == "step" && j["step"].get<int>() == o.fault_step && !commit) commit = t;
    if (j["type"] == "start" && !start) start = t;
    if (j["type"] == "resume" && !resume) {
      resume = t;
      resumed_step = j["step"].get<int64_t>();
    }
    if (j["type"] == "recovery" && !recovery) {
      recovery = t;
      event = j;
    }
  }
  bool finished = false;
  for (const nlohmann::json& j : lines) {
    if (j["type"] == "summary" && j["steps"].get<int>() == o.steps) finished = true;
  }
  if (!finished) {
    std::fprintf(stderr, "%s job did not finish: see %s\n", name.c_str(),
                 (dir / (name + ".log")).c_str());
    return r;
  }
  if (!commit || n == 0) {
    std::fprintf(stderr, "%s: step %d was not committed after the fault\n", name.c_str(),
                 o.fault_step);
    return r;
  }
  r.step_s = before / n;
  r.fault_to_commit_s = *commit - r.fault_time;
  if (live) {
    if (!recovery) return r;
    const double total = event["total_s"].get<double>();
    r.parts = {{"detection", *recovery - total - r.fault_time},
               {"agreement", event["agree_s"].get<double>()},
               {"rebuild", event["rebuild_s"].get<double>()},
               {"reshard", event["reshard_s"].get<double>()},
               {"redone step", *commit - *recovery}};
    r.steps_redone = event["steps_redone"].get<int64_t>() + 1;  // + the step in flight
    r.reshard_bytes = event["reshard_bytes"].get<int64_t>();
    r.busiest_rank_bytes = event.value("reshard_busiest_rank_bytes", int64_t{0});
    r.reshard_s = event["reshard_s"].get<double>();
  } else {
    if (!start || !resume) return r;
    r.parts = {{"to restarted job (detect, stop, respawn, set-up)", *start - r.fault_time},
               {"checkpoint load", *resume - *start},
               {"recomputed steps", *commit - *resume}};
    r.steps_redone = o.fault_step + 1 - resumed_step;
  }
  r.ok = true;
  return r;
}

// Loopback bandwidth between two processes: alltoallv of `bytes` each way through ntp's Gloo
// communicator, best of 5. Bytes per second, or 0 on failure.
double link_bandwidth(const fs::path& dir, size_t bytes) {
  const fs::path result = dir / "link.txt";
  std::vector<pid_t> children;
  for (int rank = 0; rank < 2; ++rank) {
    const pid_t pid = ::fork();
    if (pid != 0) {
      children.push_back(pid);
      continue;
    }
    auto store = ntp::comm::open_store("file:" + (dir / "link-store").string(), "link");
    if (!store.ok()) _exit(1);
    ntp::comm::GlooOptions options;
    options.store = *store;
    options.rank = rank;
    options.size = 2;
    options.prefix = "link";
    options.timeout = std::chrono::seconds(30);
    auto comm = ntp::comm::connect_gloo(options);
    if (!comm.ok()) _exit(1);
    const size_t n = bytes / sizeof(float);
    std::vector<float> in(2 * n, 1.0f), out(2 * n);
    const std::vector<size_t> counts{n, n};
    double best = 1e30;
    for (int i = 0; i < 6; ++i) {
      const auto t0 = std::chrono::steady_clock::now();
      if (!(*comm)
               ->alltoallv(ntp::comm::const_view(in), counts, ntp::comm::view(out), counts)
               .ok()) {
        _exit(1);
      }
      const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      if (i > 0) best = std::min(best, s);
    }
    if (rank == 0) std::ofstream(result) << static_cast<double>(n * sizeof(float)) / best;
    _exit(0);
  }
  bool ok = true;
  for (pid_t pid : children) {
    int status = 0;
    ::waitpid(pid, &status, 0);
    ok = ok && WIFEXITED(status) && WEXITSTATUS(status) == 0;
  }
  double bandwidth = 0;
  if (ok) std::ifstream(result) >> bandwidth;
  return bandwidth;
}

void print_run(const char* title, const Run& r) {
  std::printf("%s: fault -> step committed again in %.3f s (%lld step%s computed again)\n", title,
              r.fault_to_commit_s, static_cast<long long>(r.steps_redone),
              r.steps_redone == 1 ? "" : "s");
  for (const auto& [part, seconds] : r.parts)
    std::printf("    %-52s %8.3f s\n", part.c_str(), seconds);
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  std::vector<int> intervals{10, 50};
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    if (flag == "--width") {
      o.width = std::atoi(argv[i + 1]);
    } else if (flag == "--layers") {
      o.layers = std::atoi(argv[i + 1]);
    } else if (flag == "--save-every") {
      intervals.clear();
      for (const char* p = argv[i + 1]; *p != '\0';) {
        char* end = nullptr;
        intervals.push_back(static_cast<int>(std::strtol(p, &end, 10)));
        if (intervals.back() < 2 || end == p) {
          std::fprintf(stderr, "--save-every takes intervals of 2 or more steps: S1,S2,...\n");
          return 2;
        }
        p = *end == ',' ? end + 1 : end;
      }
    } else {
      std::fprintf(stderr, "unknown flag %s\n", flag.c_str());
      return 2;
    }
  }
  const fs::path dir =
      fs::temp_directory_path() / ("ntp-recovery-bench-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  std::printf(
      "recovery_bench: 3 replicas x TP 4 (12 workers), width %d, %d layers, context 64, "
      "batch 12; worker 6 SIGKILLs itself in backward of the step in the middle of a "
      "checkpoint interval\n",
      o.width, o.layers);
  std::printf("machine: %s\n", ntp::bench::machine_description().c_str());
  std::string list;
  bool first = true;
  for (int interval : intervals) {
    list += (list.empty() ? "" : ",") + std::to_string(interval);
    o.save_every = interval;
    o.fault_step =
        interval + interval / 2;  // step index: one checkpoint behind it, half an interval
    o.steps = o.fault_step + 5;
    std::printf("\n== checkpoint every %d steps, fault in step %d of %d ==\n", interval,
                o.fault_step + 1, o.steps);
    const fs::path at = dir / ("s" + std::to_string(interval));
    const Run live = run_job(o, Mode::kLive, at);
    const Run hierarchy = run_job(o, Mode::kHierarchy, at);
    const Run restart = run_job(o, Mode::kRestart, at);
    if (!live.ok || !hierarchy.ok || !restart.ok) {
      std::printf("a job failed; logs in %s\n", dir.c_str());
      return 1;
    }
    std::printf(
        "mean step before the fault: %.3f s (live run), %.3f s (hierarchy run), %.3f s (restart "
        "run)\n",
        live.step_s, hierarchy.step_s, restart.step_s);
    print_run("live", live);
    print_run("live, --control-plane hierarchy", hierarchy);
    print_run("restart", restart);
    std::printf("live vs restart, fault to step committed: %.1fx faster\n",
                restart.fault_to_commit_s / live.fault_to_commit_s);
    std::printf("hierarchy vs flat, fault to step committed: %.2f of the flat protocol's time\n",
                hierarchy.fault_to_commit_s / live.fault_to_commit_s);
    if (first) {
      first = false;
      const double link = link_bandwidth(
          dir, static_cast<size_t>(std::max<int64_t>(live.busiest_rank_bytes, 1 << 20)));
      const double rate =
          live.reshard_s > 0 ? static_cast<double>(live.busiest_rank_bytes) / live.reshard_s : 0;
      std::printf(
          "reshard: %lld bytes moved in all, %lld into the busiest rank in %.3f s = %.1f "
          "MB/s; loopback link (2-process alltoallv of that size) %.1f MB/s: %.2f of the "
          "link\n",
          static_cast<long long>(live.reshard_bytes),
          static_cast<long long>(live.busiest_rank_bytes), live.reshard_s, rate / 1e6, link / 1e6,
          link > 0 ? rate / link : 0.0);
    }
  }
  std::printf(
      "\nreproduce: build/bench/train/recovery_bench --width %d --layers %d --save-every %s\n",
      o.width, o.layers, list.c_str());
  fs::remove_all(dir);
  return 0;
}
