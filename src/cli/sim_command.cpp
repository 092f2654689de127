// `ntp sim`: Monte Carlo cluster goodput simulation of the failure policies.
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <optional>
#include <span>
#include <sstream>
#include <string>
#include <vector>

#include "cli/cli_error.h"
#include "cli/commands.h"
#include "sim/calibration.h"
#include "sim/config.h"
#include "sim/engine.h"
#include "sim/report.h"
#include "sim/snapshot.h"

namespace ntp::cli {

namespace {

struct SimOptions {
  std::string config;
  std::optional<int> trials;
  std::optional<std::uint64_t> seed;
  std::optional<double> days;
  std::string sweep;
  std::vector<std::string> sets;
  std::string failed_fractions;
  bool json = false;
  std::string csv_dir, plot_dir;
  // The live recovery cost model's inputs ([recovery] keys), its breakdown, its calibration.
  std::optional<double> detect_kill_s, detect_hang_s, hang_fraction, heartbeat_stale_s, store_rtt_s,
      formation_s, reshard_gbytes_per_s;
  bool recovery_cost = false;
  std::string control_plane;
  std::string calibrate_from;
  // Fail-slow ([fail_slow] keys); the rate, factor and duration flags also enable it.
  bool fail_slow = false;
  std::optional<double> slow_rate, slow_factor, slow_hours, drop_below;
};

// A number flag that, when given, overrides one config key: `--flag V` adds the override
// "key=V" (and, where it enables fail-slow, "fail_slow.enabled=true").
struct KeyFlag {
  const char* flag;
  std::optional<double> SimOptions::*value;
  const char* key;
  bool enables_fail_slow;
  const char* help;
};

// NTP-LIVE's recovery cost model (docs/sim.md "Live recovery cost"); defaults in [recovery].
constexpr KeyFlag kRecoveryFlags[] = {
    {"--detect-kill-s", &SimOptions::detect_kill_s, "recovery.detect_kill_seconds", false,
     "seconds until a signalled failure surfaces (recovery.detect_kill_seconds, 1)"},
    {"--detect-hang-s", &SimOptions::detect_hang_s, "recovery.detect_hang_seconds", false,
     "collective timeout that catches a silent hang (recovery.detect_hang_seconds, "
     "30 = ntp train --timeout-ms)"},
    {"--hang-fraction", &SimOptions::hang_fraction, "recovery.hang_fraction", false,
     "fraction of failures that are silent hangs (recovery.hang_fraction, 0.1)"},
    {"--heartbeat-stale-s", &SimOptions::heartbeat_stale_s, "recovery.heartbeat_stale_seconds",
     false,
     "heartbeat age at which the agreement drops a member "
     "(recovery.heartbeat_stale_seconds, 1)"},
    {"--store-rtt-s", &SimOptions::store_rtt_s, "recovery.store_rtt_seconds", false,
     "store round trip of the agreement (recovery.store_rtt_seconds, 0.005)"},
    {"--formation-s", &SimOptions::formation_s, "recovery.formation_seconds", false,
     "seconds to form a new layout's groups over shared links, at least "
     "(recovery.formation_seconds, 0.055)"},
    {"--reshard-gbytes-per-s", &SimOptions::reshard_gbytes_per_s, "recovery.reshard_gbytes_per_s",
     false,
     "per-GPU intra-domain reshard bandwidth, GB/s (recovery.reshard_gbytes_per_s; "
     "default half of system.scale_up_gbytes_per_s: one direction of NVLink)"}};

// Fail-slow episodes (docs/sim.md "Fail-slow"), after the --fail-slow switch.
constexpr KeyFlag kFailSlowFlags[] = {
    {"--slow-rate", &SimOptions::slow_rate, "fail_slow.rate_per_gpu_day", true,
     "fail-slow episodes per GPU-day (fail_slow.rate_per_gpu_day, default the Llama 3 "
     "interruption rate 4.74e-4: an assumption); enables fail-slow"},
    {"--slow-factor", &SimOptions::slow_factor, "fail_slow.factors", true,
     "one speed factor in (0, 1] for every episode (fail_slow.factors = [F]; default "
     "0.5/0.75/0.9 weighted 1:2:1); enables fail-slow"},
    {"--slow-hours", &SimOptions::slow_hours, "fail_slow.mean_hours", true,
     "mean episode duration in hours, exponential, > 0 (fail_slow.mean_hours, 1); "
     "enables fail-slow"},
    {"--drop-below", &SimOptions::drop_below, "fail_slow.drop_below", false,
     "the +DROP mitigation treats a GPU slower than this factor as failed "
     "(fail_slow.drop_below, 0.6)"}};

void add_key_flags(CLI::App& cmd, SimOptions& o, std::span<const KeyFlag> flags) {
  for (const KeyFlag& f : flags) cmd.add_option(f.flag, o.*f.value, f.help);
}

// The overrides of the given flags, in table order.
void add_key_overrides(const SimOptions& o, std::span<const KeyFlag> flags,
                       std::vector<std::string>& overrides) {
  for (const KeyFlag& f : flags) {
    const std::optional<double>& v = o.*f.value;
    if (!v) continue;
    std::ostringstream os;
    os << f.key << "=" << *v;
    overrides.push_back(os.str());
    if (f.enables_fail_slow) overrides.push_back("fail_slow.enabled=true");
  }
}

nlohmann::json cost_json(const sim::RecoveryCost& c) {
  return {{"total_s", c.total_s},
          {"lost_step_s", c.lost_step_s},
          {"detect_s", c.detect_s},
          {"agree_s", c.agree_s},
          {"rebuild_s", c.rebuild_s},
          {"reshard_s", c.reshard_s},
          {"busiest_gpu_bytes", c.busiest_gpu_bytes},
          {"changed_group_bytes", c.changed_group_bytes},
          {"dp_peer_bytes", c.dp_peer_bytes}};
}

nlohmann::json control_plane_json(const sim::ControlPlaneInfo& c) {
  nlohmann::json j = {{"model", c.model}, {"gpus", c.gpus}};
  if (c.model == "curve") {
    j["curve"] = c.curve;
    j["curve_commit"] = c.curve_commit;
    j["domain"] = c.domain;
    j["curve_gpus"] = {c.lo_gpus, c.hi_gpus};
    j["extrapolated"] = c.extrapolated;
  } else if (!c.note.empty()) {
    j["note"] = c.note;
  }
  return j;
}

// Once per process: a cluster outside the curve's GPU counts is priced by extending the nearest
// segment's power law.
void warn_extrapolated(const sim::RecoverySummary& r) {
  static bool warned = false;
  if (warned || !r.modelled || !r.control_plane.extrapolated) return;
  warned = true;
  const sim::ControlPlaneInfo& c = r.control_plane;
  std::fprintf(stderr,
               "ntp sim: warning: %lld GPUs is outside the control-plane curve's %lld..%lld "
               "(%s): its detect, agree and rebuild extend the nearest segment's power law; "
               "regenerate the curve with that count (scripts/control_plane_curve.sh) or set "
               "recovery.control_plane=ops-model\n",
               static_cast<long long>(c.gpus), static_cast<long long>(c.lo_gpus),
               static_cast<long long>(c.hi_gpus), c.curve.c_str());
}

nlohmann::json recovery_json(const sim::RecoverySummary& r) {
  if (!r.modelled) return {{"fixed_seconds", r.fixed_seconds}};
  return {{"control_plane", control_plane_json(r.control_plane)},
          {"tp", r.tp},
          {"degraded_tp", r.degraded},
          {"one_gpu_failure", cost_json(r.failure)},
          {"its_repair", cost_json(r.repair)},
          {"failures_per_trial", r.failures_per_trial},
          {"repairs_per_trial", r.repairs_per_trial},
          {"mean_per_event", cost_json(r.mean)}};
}

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, sep)) out.push_back(item);
  return out;
}

nlohmann::json stat_json(const sim::MetricStat& m) {
  return {{"mean", m.mean}, {"ci95", m.ci95}, {"max", m.max}};
}

void progress_bar(int done, int total) {
  const int width = 40;
  const int filled = total > 0 ? done * width / total : width;
  std::fprintf(stderr, "\r[%s%s] %d/%d", std::string(static_cast<std::size_t>(filled), '#').c_str(),
               std::string(static_cast<std::size_t>(width - filled), '.').c_str(), done, total);
  if (done == total) std::fprintf(stderr, "\n");
  std::fflush(stderr);
}

int run_sim(const SimOptions& o) {
  // A snapshot has no time axis: no days, no time series, no plots over time. Refuse rather
  // than silently ignore them.
  if (!o.failed_fractions.empty()) {
    const char* flag = o.days                ? "--days"
                       : !o.csv_dir.empty()  ? "--csv"
                       : !o.plot_dir.empty() ? "--plot"
                                             : nullptr;
    if (flag != nullptr) {
      return report_error("sim", invalid_argument(std::string(flag) +
                                                  " does not apply to --failed-fraction (a "
                                                  "snapshot has no time axis): drop " +
                                                  flag + ", or use --json for the snapshot rows"));
    }
  }
  std::vector<std::string> overrides = o.sets;
  add_key_overrides(o, kRecoveryFlags, overrides);
  if (!o.control_plane.empty()) overrides.push_back("recovery.control_plane=" + o.control_plane);
  if (o.fail_slow) overrides.push_back("fail_slow.enabled=true");
  add_key_overrides(o, kFailSlowFlags, overrides);
  if (o.trials) overrides.push_back("sim.trials=" + std::to_string(*o.trials));
  if (o.seed) overrides.push_back("sim.seed=" + std::to_string(*o.seed));
  if (o.days) {
    std::ostringstream d;
    d << "sim.days=" << *o.days;
    overrides.push_back(d.str());
  }
  // Sweep: KEY=V1,V2,... -> one run per value.
  std::string sweep_key;
  std::vector<std::string> sweep_values = {""};
  if (!o.sweep.empty()) {
    const auto eq = o.sweep.find('=');
    if (eq == std::string::npos || eq == 0 || eq + 1 >= o.sweep.size()) {
      return report_error("sim", invalid_argument("--sweep '" + o.sweep +
                                                  "' must look like section.key=V1,V2,..."));
    }
    sweep_key = o.sweep.substr(0, eq);
    sweep_values = split(o.sweep.substr(eq + 1), ',');
  }
  std::vector<sim::SimConfig> configs;
  for (const std::string& v : sweep_values) {
    std::vector<std::string> ov = overrides;
    if (!sweep_key.empty()) ov.push_back(sweep_key + "=" + v);
    Result<sim::SimConfig> c = sim::load_config(o.config, ov);
    if (!c.ok()) return report_error("sim", c.status());
    configs.push_back(*c);
  }
  // Calibration against a runtime metrics file: no trials.
  if (!o.calibrate_from.empty()) {
    Result<sim::RuntimeMetrics> metrics = sim::read_runtime_metrics(o.calibrate_from);
    if (!metrics.ok()) return report_error("sim", metrics.status());
    Result<sim::Calibration> cal = sim::calibrate(configs[0], *metrics);
    if (!cal.ok()) return report_error("sim", cal.status());
    if (o.json) {
      nlohmann::json j;
      j["step_s"] = cal->step_s;
      j["reshard_bytes_per_s"] = cal->reshard_bytes_per_s;
      j["set"] = cal->set_lines;
      for (const sim::CalibrationRow& r : cal->rows) {
        j["events"].push_back({{"cause", r.measured.cause},
                               {"old_degrees", r.measured.old_degrees},
                               {"degrees", r.measured.degrees},
                               {"measured",
                                {{"detect_s", r.measured.detect_s},
                                 {"agree_s", r.measured.agree_s},
                                 {"rebuild_s", r.measured.rebuild_s},
                                 {"reshard_s", r.measured.reshard_s},
                                 {"total_s", r.measured.total_s},
                                 {"reshard_bytes", r.measured.reshard_bytes}}},
                               {"predicted", cost_json(r.predicted)},
                               {"predicted_leader_bytes", r.predicted_leader_bytes}});
      }
      std::printf("%s\n", j.dump(2).c_str());
    } else {
      std::printf("%s", sim::format_calibration(*cal).c_str());
    }
    return kExitOk;
  }
  // The recovery cost breakdown alone: no trials.
  if (o.recovery_cost) {
    nlohmann::json jout = nlohmann::json::array();
    for (std::size_t k = 0; k < configs.size(); ++k) {
      Result<sim::Simulator> simulator = sim::Simulator::create(configs[k]);
      if (!simulator.ok()) return report_error("sim", simulator.status());
      const sim::RecoverySummary r = sim::typical_recovery(*simulator);
      warn_extrapolated(r);
      const std::string label = sweep_key.empty() ? "" : sweep_key + "=" + sweep_values[k];
      if (o.json) {
        nlohmann::json j = recovery_json(r);
        j["sweep"] = label;
        j["step_seconds"] =
            simulator->workload().step(configs[k].parallel.tp, configs[k].parallel.tp).total_s;
        jout.push_back(j);
        continue;
      }
      if (!label.empty()) std::printf("== %s ==\n", label.c_str());
      const std::string text = sim::format_recovery(r);
      std::printf("%s", text.empty() ? "no live policy in sim.policies: nothing to price\n"
                                     : text.substr(0, text.find("  trials:")).c_str());
    }
    if (o.json) std::printf("%s\n", jout.dump(2).c_str());
    return kExitOk;
  }
  std::vector<std::string> names;
  for (const auto& p : configs[0].run.policies) names.push_back(p.name());
  const bool tty = isatty(fileno(stderr)) != 0;

  // Snapshot mode: steady loss at fixed failed-GPU fractions.
  if (!o.failed_fractions.empty()) {
    std::vector<double> fractions;
    for (const std::string& f : split(o.failed_fractions, ',')) {
      char* end = nullptr;
      const double v = std::strtod(f.c_str(), &end);
      if (end == f.c_str() || *end != '\0' || !(v >= 0 && v <= 1)) {
        return report_error("sim", invalid_argument("--failed-fraction value '" + f +
                                                    "' must be a number in [0, 1]"));
      }
      fractions.push_back(v);
    }
    nlohmann::json jout = nlohmann::json::array();
    for (std::size_t k = 0; k < configs.size(); ++k) {
      std::vector<sim::SnapshotResult> rows;
      for (double f : fractions) rows.push_back(sim::snapshot(configs[k], f));
      if (o.json) {
        nlohmann::json j;
        j["sweep"] = sweep_key.empty() ? "" : sweep_key + "=" + sweep_values[k];
        for (const auto& r : rows) {
          nlohmann::json row;
          row["failed_fraction"] = r.failed_fraction;
          row["failed_gpus"] = r.failed_gpus;
          for (std::size_t i = 0; i < names.size(); ++i) {
            row["policies"][names[i]] = {{"throughput_loss", r.loss[i]},
                                         {"ci95", r.loss_ci[i]},
                                         {"spare_domains", r.spare_domains[i]}};
          }
          j["rows"].push_back(row);
        }
        jout.push_back(j);
      } else {
        if (!sweep_key.empty())
          std::printf("== %s=%s ==\n", sweep_key.c_str(), sweep_values[k].c_str());
        std::printf("%s", sim::format_snapshot_table(names, rows).c_str());
      }
    }
    if (o.json) std::printf("%s\n", jout.dump(2).c_str());
    return kExitOk;
  }

  std::vector<sim::Summary> summaries;
  const int total = static_cast<int>(configs.size()) * configs[0].run.trials;
  int done_before = 0;
  for (std::size_t k = 0; k < configs.size(); ++k) {
    Result<sim::Simulator> simulator = sim::Simulator::create(configs[k]);
    if (!simulator.ok()) return report_error("sim", simulator.status());
    const bool series = !o.csv_dir.empty() || !o.plot_dir.empty();
    std::function<void(int, int)> progress;
    if (tty && total > 1) {
      progress = [&](int done, int) { progress_bar(done_before + done, total); };
    }
    sim::Summary s = sim::run_monte_carlo(*simulator, series, progress);
    warn_extrapolated(s.recovery);
    done_before += configs[k].run.trials;
    if (!sweep_key.empty()) s.label = sweep_key + "=" + sweep_values[k];
    summaries.push_back(std::move(s));
  }
  if (!o.csv_dir.empty()) {
    const Status st = sim::write_csv(o.csv_dir, summaries, names);
    if (!st.ok()) return report_error("sim", st);
  }
  if (!o.plot_dir.empty()) {
    const Status st = sim::write_plots(o.plot_dir, summaries, names, sweep_key);
    if (st.code() == StatusCode::kFailedPrecondition) {
      std::fprintf(stderr, "ntp sim: note: %s\n", st.message().c_str());
    } else if (!st.ok()) {
      return report_error("sim", st);
    }
  }
  if (o.json) {
    nlohmann::json out;
    out["config"] = o.config;
    for (const sim::Summary& s : summaries) {
      nlohmann::json j;
      j["sweep"] = s.label;
      j["trials"] = s.trials;
      j["days"] = s.days;
      j["failures"] = stat_json(s.failures);
      j["mean_failed_gpus"] = stat_json(s.mean_failed_gpus);
      j["max_failed_tp_groups"] = stat_json(s.max_failed_groups);
      j["events"] = s.events;
      j["step_seconds"] = s.step_seconds;
      j["checkpoint_interval_seconds"] = s.checkpoint_interval_s;
      j["live_recovery"] = recovery_json(s.recovery);
      if (s.fail_slow) {
        j["fail_slow"] = {{"episodes", stat_json(s.slow_episodes)},
                          {"mean_slow_gpus", stat_json(s.mean_slow_gpus)}};
      }
      for (const sim::PolicySummary& p : s.policies) {
        nlohmann::json jp = {{"name", p.name},
                             {"throughput_loss", stat_json(p.throughput_loss)},
                             {"goodput", stat_json(p.goodput)},
                             {"energy_mwh", stat_json(p.energy_mwh)},
                             {"energy_per_work", stat_json(p.energy_per_work)},
                             {"pauses", stat_json(p.pauses)},
                             {"paused_hours", stat_json(p.paused_hours)},
                             {"down_hours", stat_json(p.down_hours)},
                             {"restarts", stat_json(p.restarts)},
                             {"spares_needed", stat_json(p.spares_needed)}};
        if (s.fail_slow) {
          jp["fail_slow_loss"] = stat_json(p.fail_slow_loss);
          jp["fail_slow_goodput_loss"] = stat_json(p.fail_slow_goodput_loss);
        }
        j["policies"].push_back(jp);
      }
      out["results"].push_back(j);
    }
    std::printf("%s\n", out.dump(2).c_str());
    return kExitOk;
  }
  for (const sim::Summary& s : summaries) std::printf("%s\n", sim::format_table(s).c_str());
  const std::string slow_table = sim::format_fail_slow_table(summaries);
  if (!slow_table.empty()) std::printf("%s\n", slow_table.c_str());
  return kExitOk;
}

}  // namespace

void add_sim_command(CLI::App& app, int& exit_code) {
  CLI::App* cmd = app.add_subcommand(
      "sim",
      "Simulate cluster goodput under failures for DP-DROP, SPARES, CKPT-RESTART, NTP, "
      "NTP-PW and NTP-LIVE (and, with --fail-slow, under slowed GPUs)");
  auto o = std::make_shared<SimOptions>();
  cmd->add_option("--config", o->config,
                  "simulator config (TOML), e.g. configs/sim/paper-b200-nvl32.toml")
      ->required();
  cmd->add_option("--trials", o->trials, "Monte Carlo trials (overrides sim.trials)");
  cmd->add_option("--seed", o->seed, "random seed (overrides sim.seed)");
  cmd->add_option("--days", o->days, "simulated days per trial (overrides sim.days)");
  cmd->add_option("--sweep", o->sweep,
                  "KEY=V1,V2,...: one run per value, e.g. failures.rate_multiplier=1,2,4");
  cmd->add_option("--set", o->sets, "KEY=VALUE: override one config key (repeatable)");
  cmd->add_option("--failed-fraction", o->failed_fractions,
                  "F1,F2,...: snapshot mode, steady throughput loss with these fractions of GPUs "
                  "failed (the paper's loss curve)");
  cmd->add_flag("--json", o->json, "print JSON instead of tables");
  cmd->add_option("--csv", o->csv_dir,
                  "write summary.csv and time series CSVs to DIR (and fail_slow.csv when fail-slow "
                  "is active)");
  cmd->add_option("--plot", o->plot_dir, "write gnuplot scripts and SVG plots to DIR");
  add_key_flags(*cmd, *o, kRecoveryFlags);
  cmd->add_option("--control-plane", o->control_plane,
                  "what prices NTP-LIVE's detect, agree and rebuild (recovery.control_plane): "
                  "curve (control_plane_sim's, configs/sim/control_plane_curve.json; the default "
                  "when it loads) or ops-model (store operations per member)")
      ->check(CLI::IsMember({"curve", "ops-model"}));
  cmd->add_flag("--recovery-cost", o->recovery_cost,
                "print NTP-LIVE's recovery cost breakdown for one lost GPU and its repair, run "
                "no trials");
  cmd->add_option("--calibrate-from", o->calibrate_from,
                  "METRICS.jsonl of an ntp train run with faults: fit the recovery constants and "
                  "print predicted vs measured per event (the config must describe that job, "
                  "e.g. configs/sim/toy-live.toml)");
  // Fail-slow episodes (docs/sim.md "Fail-slow"); off unless enabled. Mitigations are policy
  // suffixes: sim.policies=["NTP", "NTP+SHARE", "NTP+REBALANCE", "NTP-PW+BOOST", "NTP+DROP"].
  cmd->add_flag("--fail-slow", o->fail_slow,
                "enable fail-slow episodes (fail_slow.enabled): a GPU runs at a fraction of its "
                "speed for a while; prints the fail-slow table (throughput loss and goodput per "
                "policy, the points due to fail-slow in brackets). A policy's reaction is its "
                "suffix: +SHARE, "
                "+REBALANCE (NTP), +BOOST (NTP-PW), +DROP; none = unmitigated");
  add_key_flags(*cmd, *o, kFailSlowFlags);
  cmd->callback([o, &exit_code] { exit_code = run_sim(*o); });
}

}  // namespace ntp::cli
