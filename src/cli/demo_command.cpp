// `ntp demo`: the main job. Trains a small GPT-2 on the fortunes corpus as replicas of worker
// processes while devices fail and return, then compares the run with a failure-free run of the
// same seed and with the checkpoint-restart way to recover (docs/demo.md).
#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "cli/cli_error.h"
#include "cli/commands.h"
#include "core/plot.h"
#include "launch/fault_spec.h"

namespace ntp::cli {
namespace {

namespace fs = std::filesystem;

struct DemoArgs {
  int replicas = 3;
  int tp = 4;
  int64_t steps = 160;
  std::string out = "out/demo";
  std::vector<std::string> faults;  // default: see add_demo_command
  bool baselines = true;
  int timeout_ms = 2000;
  std::string model = "gpt2";  // or "moe": the same job on a Mixtral-style MoE (kMoeFlags)
};

// The train flags of every run: the batch split follows each replica's pace (boost: on CPU
// nothing can be boosted, so shares do it all), in micro-batches large enough that a replica's
// share is one of them.
constexpr const char* kBatchFlags = "--batch 12 --micro-batch 12 --batch-policy boost";
// A MoE's shares move in whole micro-batches only (train/batch_split.h, BatchGrain): its
// load-balancing loss is a statistic of each forward's tokens, so every forward must hold the
// samples it holds in a failure-free run. With 3 micro-batches for 3 replicas no such split
// differs from keep's, which the flags say plainly; a larger batch would let boost move some.
constexpr const char* kMoeBatchFlags = "--batch 12 --micro-batch 4 --batch-policy keep";

// `--model moe`: a Llama decoder whose FFNs are 8 routed experts, top 2 (docs/model.md), held
// whole by the TP ranks: a lost rank's experts move to the survivors (nonuniform expert
// parallelism) and back on repair.
constexpr const char* kMoeFlags = "--model moe --kv-heads 2 --experts 8 --top-k 2";

std::string model_flags(const DemoArgs& a) { return a.model == "moe" ? kMoeFlags : ""; }

std::string batch_flags(const DemoArgs& a) {
  return a.model == "moe" ? kMoeBatchFlags : kBatchFlags;
}

std::string model_name(const DemoArgs& a) {
  return a.model == "moe" ? "Mixtral-style MoE (8 experts, top 2, dealt whole over the TP ranks)"
                          : "GPT-2";
}

// What one run left in its metrics file.
struct RunFigures {
  std::string name;
  double wall_s = 0;
  int exit_code = -1;
  std::map<int64_t, double> loss;               // step -> loss (last execution)
  std::map<int64_t, std::vector<int>> degrees;  // step -> replica degrees
  std::map<int64_t, double> step_s;             // step -> its time (last execution)
  std::vector<double> injected_at;  // Unix seconds at which the launcher said it injected a fault
  std::vector<nlohmann::json> recoveries;
  double eval_loss = 0, tokens_per_s = 0;
  int64_t steps = 0;
};

std::string self_binary() { return fs::read_symlink("/proc/self/exe").string(); }

// Lines worth showing from the live run: the leader's progress and every event.
bool worth_showing(const std::string& line) {
  for (const char* key : {"| loss", "device lost", "repaired slots", "injecting",
                          "repair:", "eval after", "done:", "restarting the job", "resumed from",
                          "rebalanced for speed", "equal shares again", "throttle"}) {
    if (line.find(key) != std::string::npos) return true;
  }
  return false;
}

// Steps [at, until) that a slow: or throttle: fault of `faults` slows (until: the end).
std::vector<std::pair<int64_t, int64_t>> slowed_spans(const std::vector<std::string>& faults,
                                                      int64_t steps) {
  std::vector<std::pair<int64_t, int64_t>> out;
  for (const std::string& f : faults) {
    Result<launch::FaultSpec> spec = launch::parse_fault_spec(f);
    if (!spec.ok() || !spec->step) continue;
    if (spec->kind != launch::FaultKind::kSlow && spec->kind != launch::FaultKind::kThrottle) {
      continue;
    }
    out.emplace_back(*spec->step, spec->until.value_or(steps));
  }
  return out;
}

double median_of(std::vector<double> v) {
  if (v.empty()) return NAN;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// Replicas below full degree in `degrees`.
int replicas_down(const std::vector<int>& degrees, int tp) {
  return static_cast<int>(
      std::count_if(degrees.begin(), degrees.end(), [&](int t) { return t < tp; }));
}

// Everything `command` writes to stdout (with stderr), or "" when it cannot start.
std::string capture(const std::string& command) {
  FILE* pipe = ::popen((command + " 2>&1").c_str(), "r");
  if (pipe == nullptr) return "";
  std::string out;
  char buffer[4096];
  while (std::fgets(buffer, sizeof(buffer), pipe) != nullptr) out += buffer;
  ::pclose(pipe);
  return out;
}

// The report's last section: the live run's recovery events fitted by `ntp sim --calibrate-from`
// (configs/sim/toy-live.toml describes this job), and the fitted control-plane constants
// (detection, store round trips, communicator set-up) applied to the NTP paper's 32,768-GPU
// cluster. The bandwidths are this host's loopback and are not carried over.
std::string at_scale(const std::string& metrics) {
  const std::string ntp = "'" + self_binary() + "' sim --config configs/sim/";
  if (!fs::exists("configs/sim/toy-live.toml") ||
      !fs::exists("configs/sim/paper-b200-nvl32.toml")) {
    return "\n## At scale\n\n(skipped: configs/sim/ is not in the working directory; run the "
           "demo from the source tree)\n";
  }
  const std::string fit = capture(ntp + "toy-live.toml --calibrate-from '" + metrics + "'");
  std::string overrides;
  const size_t at = fit.find("as overrides: ");
  if (at != std::string::npos) {
    std::istringstream words(fit.substr(at + 14, fit.find('\n', at) - at - 14));
    for (std::string flag, value; words >> flag >> value;) {
      if (value.rfind("recovery.", 0) == 0 && value.find("reshard") == std::string::npos) {
        overrides += " --set " + value;
      }
    }
  }
  auto scaled = [&](const std::string& extra) {
    const std::string out = capture(ntp + "paper-b200-nvl32.toml --trials 4" + extra);
    std::string lines;
    std::istringstream in(out);
    for (std::string line; std::getline(in, line);) {
      if (line.rfind("NTP-LIVE", 0) == 0 || line.rfind("CKPT-RESTART", 0) == 0 ||
          line.rfind("DP-DROP", 0) == 0 || line.rfind("live recovery, one GPU lost", 0) == 0 ||
          line.rfind("policy", 0) == 0) {
        lines += "    " + line + "\n";
      }
    }
    return lines;
  };
  std::ostringstream md;
  md << "\n## At scale\n\nThis run's four events, fitted (`ntp sim --config "
        "configs/sim/toy-live.toml --calibrate-from live/metrics.jsonl`):\n\n```\n"
     << fit << "```\n\nIts control-plane constants ("
     << (overrides.empty() ? "none fitted" : overrides)
     << "; the bandwidths are this host's loopback and stay the cluster's) applied to the NTP "
        "paper's cluster, 32,768 B200 GPUs in NVL32 domains, 15 days, 4 trials "
        "(`ntp sim --config configs/sim/paper-b200-nvl32.toml --trials 4`), against the config's "
        "own constants:\n\n```\nwith this run's constants:\n"
     << scaled(overrides) << "with the config's constants:\n"
     << scaled("")
     << "```\n\nRead it as a lower bound: the constants were measured at 12 workers, and "
        "today's control plane grows faster than linearly with the job (docs/perf.md, \"Control "
        "plane\": O(N^2) store operations in the abort, the agreement and the group formation), "
        "so at 32,768 GPUs they would be far larger. The degraded steps' cost is not carried "
        "over: on this host it is the 12 workers' scheduling on 2 cores, not a device's compute; "
        "the simulator takes a degraded domain's speed from its workload model.\n";
  return md.str();
}

RunFigures run(const DemoArgs& a, const std::string& name, const std::vector<std::string>& faults,
               const std::string& extra_launch, const std::string& extra_train, bool show) {
  const std::string ntp = self_binary();
  const fs::path dir = fs::path(a.out) / name;
  std::ostringstream cmd;
  cmd << "'" << ntp << "' launch --nproc-per-node " << a.replicas * a.tp << " --log-dir '"
      << (dir / "logs").string() << "' " << extra_launch;
  for (const std::string& f : faults) cmd << " --inject " << f;
  cmd << " -- '" << ntp << "' train --domains " << a.replicas << " --tp " << a.tp << " --steps "
      << a.steps << " --eval-every 40 --timeout-ms " << a.timeout_ms << " --out '" << dir.string()
      << "' " << model_flags(a) << " " << extra_train << " 2>&1";
  RunFigures f;
  f.name = name;
  const auto start = std::chrono::steady_clock::now();
  FILE* pipe = ::popen(cmd.str().c_str(), "r");
  if (pipe == nullptr) return f;
  char buffer[4096];
  while (std::fgets(buffer, sizeof(buffer), pipe) != nullptr) {
    std::string line(buffer);
    if (line.find("ntp launch: injecting") != std::string::npos) {  // unbuffered stderr: now
      f.injected_at.push_back(
          std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch())
              .count());
    }
    if (!show || !worth_showing(line)) continue;
    if (line.rfind("[rank ", 0) == 0) line = line.substr(line.find(']') + 2);
    std::fputs(("  " + line).c_str(), stdout);
    std::fflush(stdout);
  }
  const int status = ::pclose(pipe);
  f.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128;
  f.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::ifstream metrics(dir / "metrics.jsonl");
  std::vector<int> current;
  for (std::string line; std::getline(metrics, line);) {
    const nlohmann::json j = nlohmann::json::parse(line, nullptr, false);
    if (j.is_discarded()) continue;
    const std::string type = j.value("type", "");
    if (type == "start") current = j["degrees"].get<std::vector<int>>();
    if (type == "recovery") {
      current = j["degrees"].get<std::vector<int>>();
      f.recoveries.push_back(j);
    }
    if (type == "step") {
      const int64_t s = j["step"].get<int64_t>();
      f.loss[s] = j["loss"].get<double>();
      f.step_s[s] = j["step_s"].get<double>();
      std::vector<int> d;
      for (const nlohmann::json& r : j["replicas"]) d.push_back(r["degree"].get<int>());
      f.degrees[s] = d;
    }
    if (type == "eval") f.eval_loss = j["loss"].get<double>();
    if (type == "summary") {
      f.steps = j["steps"].get<int64_t>();
      f.tokens_per_s = j["tokens_per_s"].get<double>();
    }
  }
  return f;
}

Status write_plots(const DemoArgs& a, const RunFigures& live, const RunFigures* reference,
                   const RunFigures* restart) {
  const std::string dir = a.out;
  {
    std::ofstream d(dir + "/loss.dat");
    for (const auto& [s, l] : live.loss) {
      d << s + 1 << ' ' << l << ' '
        << (reference && reference->loss.contains(s) ? reference->loss.at(s) : NAN) << ' '
        << (restart && restart->loss.contains(s) ? restart->loss.at(s) : NAN) << '\n';
    }
    std::ofstream g(dir + "/degrees.dat");
    for (const auto& [s, degrees] : live.degrees) {
      g << s + 1;
      for (int t : degrees) g << ' ' << t;
      g << '\n';
    }
  }
  std::ostringstream loss;
  loss << "set title 'training loss: live recovery vs failure-free run (same seed)'\n"
       << "set xlabel 'step'\nset ylabel 'loss (nats)'\nplot '" << dir
       << "/loss.dat' using 1:2 with lines lw 2 title 'live recovery (this run)'";
  if (reference) loss << ", '' using 1:3 with lines dt 2 title 'failure-free'";
  if (restart) loss << ", '' using 1:4 with lines dt 3 title 'restart from checkpoint'";
  loss << "\n";
  std::ostringstream degrees;
  degrees << "set title 'TP degree of each replica'\nset xlabel 'step'\nset ylabel 'TP degree'\n"
          << "set yrange [0:" << a.tp + 1 << "]\nplot ";
  for (int r = 0; r < a.replicas; ++r) {
    degrees << (r ? ", " : "") << "'" << dir << "/degrees.dat' using 1:" << r + 2
            << " with steps lw 2 title 'replica " << r << "'";
  }
  degrees << "\n";
  return render_plots(dir, "set key outside right\nset grid\n",
                      {{"loss", loss.str()}, {"degrees", degrees.str()}});
}

int run_demo(const DemoArgs& a) {
  if (a.replicas < 2 || a.tp < 2) {
    return report_error("demo", invalid_argument("--replicas and --tp must be at least 2"));
  }
  if (a.steps < 20) return report_error("demo", invalid_argument("--steps must be at least 20"));
  if (a.model != "gpt2" && a.model != "moe") {
    return report_error("demo",
                        invalid_argument("--model '" + a.model + "' is unknown; use gpt2 or moe"));
  }
  if (a.model == "moe" && a.tp > 8) {
    return report_error("demo", invalid_argument("--model moe holds 8 experts: --tp " +
                                                 std::to_string(a.tp) + " must be at most 8"));
  }
  std::error_code ec;
  if (fs::exists(fs::path(a.out) / "live")) fs::remove_all(a.out, ec);
  fs::create_directories(a.out, ec);
  if (ec) {
    return report_error("demo", invalid_argument("--out " + a.out + ": " + ec.message()));
  }
  std::printf(
      "ntp demo: %d replicas of TP %d (%d worker processes) train a %s on the fortunes "
      "corpus for %lld steps; everything goes to %s/\n",
      a.replicas, a.tp, a.replicas * a.tp, model_name(a).c_str(), static_cast<long long>(a.steps),
      a.out.c_str());
  std::printf("faults:");
  for (const std::string& f : a.faults) std::printf(" %s", f.c_str());
  std::printf("\n\n== 1. the run: devices fail and return while the job trains\n");
  std::fflush(stdout);
  const RunFigures live = run(a, "live", a.faults, "", batch_flags(a) + " --rebalance", true);
  if (live.exit_code != 0) {
    std::fprintf(stderr, "ntp demo: the live run failed (exit %d); logs in %s/live/logs\n",
                 live.exit_code, a.out.c_str());
    return kExitFailure;
  }
  std::optional<RunFigures> reference, restart;
  if (a.baselines) {
    std::printf("\n== 2. the same run without failures (same seed), for comparison\n");
    std::fflush(stdout);
    reference = run(a, "reference", {}, "", batch_flags(a) + " --rebalance", false);
    std::printf("  done in %.1f s\n", reference->wall_s);
    // The checkpoint-restart baseline: a failure stops the job, `ntp launch` restarts it on the
    // survivors from the last checkpoint (a hang is injected as a kill: a restart needs a death;
    // no repairs: the lost slots stay lost; slowdowns stay, unmitigated).
    std::vector<std::string> kills;
    for (const std::string& f : a.faults) {
      if (f.rfind("kill:", 0) == 0) kills.push_back(f);
      if (f.rfind("hang:", 0) == 0) kills.push_back("kill:" + f.substr(5));
      if (f.rfind("slow:", 0) == 0 || f.rfind("throttle:", 0) == 0) kills.push_back(f);
    }
    std::printf("\n== 3. the same faults recovered the Megatron way: restart from a checkpoint\n");
    std::fflush(stdout);
    restart =
        run(a, "restart", kills, "--restart-on-failure",
            batch_flags(a) + " --no-live-recovery --no-rebalance --save-every 10 --save-dir '" +
                a.out + "/restart/ckpt'",
            false);
    std::printf("  done in %.1f s (exit %d)\n", restart->wall_s, restart->exit_code);
  }

  // ---- the report ----
  std::ostringstream md;
  md << "# ntp demo report\n\n"
     << a.replicas << " replicas x TP " << a.tp << ", " << a.steps << " steps; faults:";
  for (const std::string& f : a.faults) md << " `" << f << "`";
  md << "\n\n## Events (live run)\n\n| step | event | TP degrees | detected after the fault | "
        "re-formed in |\n"
     << "|---|---|---|---|---|\n";
  std::printf("\n== events\n");
  int detected = 0, repaired = 0;
  for (const nlohmann::json& e : live.recoveries) {
    const bool repair = e["cause"] == "repair";
    // Detected after: from the launcher's injection (as the demo read it) to the start of the
    // re-formation (the event's time less its length); the step's own figure counts from the
    // step's start.
    double detect = e.value("detect_s", 0.0);
    if (!repair && static_cast<size_t>(detected) < live.injected_at.size()) {
      detect = e["time"].get<double>() - e["total_s"].get<double>() -
               live.injected_at[static_cast<size_t>(detected)];
    }
    (repair ? repaired : detected) += 1;
    std::ostringstream deg;
    deg << e["old_degrees"].dump() << " -> " << e["degrees"].dump();
    md << "| " << e["step"].get<int64_t>() + 1 << " | "
       << (repair ? "repaired slot admitted" : "device lost") << " | " << deg.str() << " | "
       << (repair ? std::string("-") : std::to_string(detect) + " s") << " | "
       << e["total_s"].get<double>() << " s |\n";
    std::printf("  step %4lld: %-22s TP %s, re-formed in %.2f s\n",
                static_cast<long long>(e["step"].get<int64_t>() + 1),
                repair ? "repaired slot admitted" : "device lost", deg.str().c_str(),
                e["total_s"].get<double>());
  }
  md << "\n## Goodput on this fault schedule\n\n"
     << "| recovery | how | wall s | steps | final loss | held-out loss | time lost vs "
        "failure-free |\n"
     << "|---|---|---|---|---|---|---|\n";
  std::printf("\n== goodput on this fault schedule\n  %-34s %-10s %8s %7s %11s %9s\n", "recovery",
              "how", "wall s", "steps", "final loss", "lost s");
  auto row = [&](const std::string& label, const std::string& how, double wall, int64_t steps,
                 double loss, double eval, double lost) {
    md << "| " << label << " | " << how << " | " << wall << " | " << steps << " | " << loss << " | "
       << eval << " | " << lost << " |\n";
    std::printf("  %-34s %-10s %8.1f %7lld %11.4f %9.1f\n", label.c_str(), how.c_str(), wall,
                static_cast<long long>(steps), loss, lost);
  };
  const double ref_wall = reference ? reference->wall_s : live.wall_s;
  if (reference) {
    row("none (failure-free)", "measured", reference->wall_s, reference->steps,
        reference->loss.empty() ? 0 : reference->loss.rbegin()->second, reference->eval_loss, 0);
  }
  row("ntp live (this run)", "measured", live.wall_s, live.steps,
      live.loss.empty() ? 0 : live.loss.rbegin()->second, live.eval_loss, live.wall_s - ref_wall);
  if (restart) {
    row("restart from checkpoint", "measured", restart->wall_s, restart->steps,
        restart->loss.empty() ? 0 : restart->loss.rbegin()->second, restart->eval_loss,
        restart->wall_s - ref_wall);
  }
  double degraded_ratio = NAN;
  if (reference && !reference->loss.empty()) {
    // DP-DROP: while k replicas have lost a device they idle until repaired and the others carry
    // the global batch, so that step takes R / (R - k) times the failure-free run's same step.
    // Only step times count: start-up and the end are the failure-free run's.
    double extra = 0.0;
    int64_t down_steps = 0;
    for (const auto& [s, d] : live.degrees) {
      const int down = replicas_down(d, a.tp);
      if (down == 0 || !reference->step_s.contains(s)) continue;
      ++down_steps;
      extra += reference->step_s.at(s) * down / static_cast<double>(a.replicas - down);
    }
    row("drop the replica (DP-DROP)", "modelled", reference->wall_s + extra, a.steps, NAN, NAN,
        extra);
    // The steps a replica ran degraded (below full degree) or slowed, against the same steps of
    // the failure-free run.
    const std::vector<std::pair<int64_t, int64_t>> slowed = slowed_spans(a.faults, a.steps);
    std::vector<double> live_s, reference_s;
    for (const auto& [s, d] : live.degrees) {
      const bool slow = std::any_of(slowed.begin(), slowed.end(), [&](const auto& span) {
        return s >= span.first && s < span.second;
      });
      if ((replicas_down(d, a.tp) == 0 && !slow) || !reference->step_s.contains(s)) continue;
      live_s.push_back(live.step_s.at(s));
      reference_s.push_back(reference->step_s.at(s));
    }
    degraded_ratio = median_of(live_s) / median_of(reference_s);
    md << "\nDP-DROP is modelled from the failure-free run's step times: in each of the "
       << down_steps << " steps in which k replicas had lost a device, the others carry their "
       << "share, R / (R - k) times as long; start-up is left out. The restart baseline turns the "
          "hang into a kill (a restart needs a death) and has no repairs: its lost slots stay "
          "lost to the end, its slowed device stays slow. Wall times include process start-up; "
          "the whole job runs on this machine's cores.\n"
       << "\nThe " << live_s.size()
       << " steps in which a replica ran degraded or slowed took a median "
       << median_of(live_s) * 1e3 << " ms live against " << median_of(reference_s) * 1e3
       << " ms for the same steps of the failure-free run: " << degraded_ratio << " x.\n";
    std::printf(
        "\n  degraded or slowed steps: median %.1f ms live, %.1f ms failure-free (%.3f x)\n",
        median_of(live_s) * 1e3, median_of(reference_s) * 1e3, degraded_ratio);
  }
  const bool loss_ok = reference && !reference->loss.empty() && !live.loss.empty() &&
                       std::abs(live.loss.rbegin()->second - reference->loss.rbegin()->second) <=
                           1e-3 * std::abs(reference->loss.rbegin()->second);
  md << "\nFaults detected and recovered: " << detected << "; repairs admitted: " << repaired
     << "; live final loss " << (loss_ok ? "matches" : "differs from")
     << " the failure-free run's.\n";
  md << at_scale((fs::path(a.out) / "live" / "metrics.jsonl").string());
  std::ofstream(a.out + "/report.md") << md.str();
  nlohmann::json summary = {
      {"finished", live.exit_code == 0 && live.steps == a.steps},
      {"steps", live.steps},
      {"faults_recovered", detected},
      {"repairs_admitted", repaired},
      {"live_final_loss", live.loss.empty() ? 0 : live.loss.rbegin()->second},
      {"reference_final_loss",
       reference && !reference->loss.empty() ? reference->loss.rbegin()->second : 0.0},
      {"live_wall_s", live.wall_s},
      {"reference_wall_s", reference ? reference->wall_s : 0.0},
      {"restart_wall_s", restart ? restart->wall_s : 0.0},
      {"restart_finished", restart && restart->exit_code == 0 && restart->steps == a.steps},
      {"degraded_step_ratio", std::isnan(degraded_ratio) ? 0.0 : degraded_ratio}};
  std::ofstream(a.out + "/summary.json") << summary.dump(2) << "\n";

  Status plots =
      write_plots(a, live, reference ? &*reference : nullptr, restart ? &*restart : nullptr);
  if (reference) {  // without the baselines there is nothing to compare with
    std::printf("\n%s\n", loss_ok ? "the live run ends on the failure-free run's loss curve"
                                  : "note: the live run's final loss differs from the reference");
  }
  if (!plots.ok()) std::printf("note: %s\n", plots.message().c_str());
  std::printf("\nreport: %s/report.md, summary: %s/summary.json\n", a.out.c_str(), a.out.c_str());
  if (plots.ok()) {
    std::printf("plots:  %s/loss.png (.svg), %s/degrees.png (.svg)\n", a.out.c_str(),
                a.out.c_str());
  }
  std::printf("everything this demo wrote is under %s/\n", a.out.c_str());
  return live.steps == a.steps ? kExitOk : kExitFailure;
}

}  // namespace

void add_demo_command(CLI::App& app, int& exit_code) {
  auto a = std::make_shared<DemoArgs>();
  CLI::App* cmd = app.add_subcommand(
      "demo",
      "The main job: train while devices fail and return, compare with a failure-free run and "
      "with checkpoint-restart, plot it (docs/demo.md)");
  cmd->add_option("--replicas", a->replicas, "DP replicas (scale-up domains)")
      ->capture_default_str();
  cmd->add_option("--tp", a->tp, "Device slots per replica")->capture_default_str();
  cmd->add_option("--steps", a->steps, "Training steps")->capture_default_str();
  cmd->add_option("--out", a->out, "Output folder (replaced)")->capture_default_str();
  cmd->add_option("--inject", a->faults,
                  "Faults as for ntp launch (repeatable); default: a device of replica 1 dies at "
                  "step 40, one of replica 2 hangs at 60, both are repaired at 100 and 120, and "
                  "one of replica 0 computes at half speed from step 130 (throttle:)");
  cmd->add_option("--model", a->model,
                  "gpt2, or moe: the same job on a Mixtral-style MoE whose experts a lost device "
                  "hands to the survivors (nonuniform expert parallelism)")
      ->capture_default_str();
  cmd->add_flag("!--no-baselines", a->baselines,
                "Skip the failure-free and checkpoint-restart runs");
  cmd->add_option("--timeout-ms", a->timeout_ms, "Communicator timeout (hang detection)")
      ->capture_default_str();
  cmd->callback([a, &exit_code] {
    if (a->faults.empty()) {
      const int k = 1 * a->tp + 2 % a->tp, h = 2 % a->replicas * a->tp + 1;
      const int64_t s = a->steps;
      a->faults = {"kill:rank=" + std::to_string(k) + ",at=" + std::to_string(s / 4),
                   "hang:rank=" + std::to_string(h) + ",at=" + std::to_string(s * 3 / 8),
                   "repair:rank=" + std::to_string(k) + ",at=" + std::to_string(s * 5 / 8),
                   "repair:rank=" + std::to_string(h) + ",at=" + std::to_string(s * 3 / 4),
                   "throttle:rank=1,factor=0.5,at=" + std::to_string(s * 13 / 16)};
    }
    exit_code = run_demo(*a);
  });
}

}  // namespace ntp::cli
