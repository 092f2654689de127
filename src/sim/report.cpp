#include "sim/report.h"

#include "core/plot.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <utility>

#include "shard/balance.h"
#include "sim/stats.h"

namespace ntp::sim {

namespace {

// Non-finite samples (energy per work of a trial that did no work) are skipped.
struct Acc {
  RunningStat s;
  double max = -1e300;
  void add(double x) {
    if (!std::isfinite(x)) return;
    s.add(x);
    max = std::max(max, x);
  }
  MetricStat get() const {
    if (s.count() == 0) return {std::nan(""), 0.0, std::nan("")};
    return {s.mean(), s.ci95(), max};
  }
};

std::string pct(const MetricStat& m) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%6.2f%% +-%.2f", 100 * m.mean, 100 * m.ci95);
  return buf;
}

}  // namespace

RecoverySummary typical_recovery(const Simulator& sim) {
  RecoverySummary out;
  const SimConfig& c = sim.config();
  out.fixed_seconds = c.recovery.live_recovery_seconds;
  const RecoveryCostModel* model = sim.recovery_model();
  if (model == nullptr) return out;
  out.modelled = true;
  out.control_plane = model->control_plane();
  out.tp = c.parallel.tp;
  out.degraded = sim.workload().degree_after_failures(1);
  out.failure = model->event(true, {{0, out.tp, out.degraded}}, out.tp);
  out.repair = model->event(false, {{0, out.degraded, out.tp}}, out.tp);
  return out;
}

namespace {

std::string gigabytes(std::int64_t bytes) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.3g GB", static_cast<double>(bytes) / 1e9);
  return buf;
}

std::string breakdown(const RecoveryCost& c) {
  char buf[512];
  std::snprintf(buf, sizeof(buf),
                "%.2f s = lost half step %.2f + detect %.2f + agree %.2f + rebuild %.2f "
                "+ reshard %.3f (%s through the busiest GPU; %s into the group, "
                "%s of it from DP peers)",
                c.total_s, c.lost_step_s, c.detect_s, c.agree_s, c.rebuild_s, c.reshard_s,
                gigabytes(c.busiest_gpu_bytes).c_str(), gigabytes(c.changed_group_bytes).c_str(),
                gigabytes(c.dp_peer_bytes).c_str());
  return buf;
}

}  // namespace

std::string format_control_plane(const ControlPlaneInfo& info) {
  std::ostringstream os;
  os << "live recovery control plane (detect, agree, rebuild): ";
  if (info.model == "curve") {
    os << "curve " << info.curve << " (control_plane_sim --hierarchy, " << info.domain
       << "-GPU domains, " << info.lo_gpus << ".." << info.hi_gpus << " GPUs) at " << info.gpus
       << " GPUs" << (info.extrapolated ? ", extrapolated" : "");
  } else {
    os << "ops-model (recovery.*_store_ops_per_member over recovery.store_ops_per_s)";
    if (!info.note.empty()) os << "; no curve: " << info.note;
  }
  return os.str();
}

std::string format_recovery(const RecoverySummary& r) {
  std::ostringstream os;
  if (!r.modelled) {
    if (r.fixed_seconds >= 0) {
      os << "live recovery: fixed " << r.fixed_seconds
         << " s per failure and repair (recovery.live_recovery_seconds)\n";
    }
    return os.str();
  }
  os << format_control_plane(r.control_plane) << "\n";
  os << "live recovery, one GPU lost (TP " << r.tp << " -> " << r.degraded
     << "): " << breakdown(r.failure) << "\n";
  os << "  its repair (TP " << r.degraded << " -> " << r.tp << "): " << breakdown(r.repair) << "\n";
  char buf[256];
  std::snprintf(buf, sizeof(buf),
                "  trials: %.1f failures + %.1f repairs priced per trial, %.2f s each on average "
                "(detect %.2f, agree %.2f, rebuild %.2f, reshard %.3f, lost step %.2f)\n",
                r.failures_per_trial, r.repairs_per_trial, r.mean.total_s, r.mean.detect_s,
                r.mean.agree_s, r.mean.rebuild_s, r.mean.reshard_s, r.mean.lost_step_s);
  os << buf;
  return os.str();
}

Summary run_monte_carlo(const Simulator& sim, bool series,
                        const std::function<void(int, int)>& progress,
                        std::vector<TrialRecord>* records) {
  const SimConfig& c = sim.config();
  const std::size_t n = c.run.policies.size();
  const auto start = std::chrono::steady_clock::now();
  std::vector<Acc> loss(n), goodput(n), energy(n), epw(n), paused(n), pauses(n), down(n),
      restarts(n), spares(n), slow_loss(n), slow_goodput_loss(n);
  Acc failures, mean_failed, max_groups, slow_episodes, mean_slow;
  Summary out;
  out.recovery = typical_recovery(sim);
  RecoveryTotals live;
  const bool slow_on = c.fail_slow.active();
  const std::optional<Simulator> without =
      slow_on ? std::optional<Simulator>(sim.without_fail_slow()) : std::nullopt;
  for (int t = 0; t < c.run.trials; ++t) {
    TrialResult r = sim.run_trial(t, series && t == 0);
    const TrialResult base = without ? without->run_trial(t, false) : TrialResult{};
    out.events += r.events;
    failures.add(static_cast<double>(r.failures));
    mean_failed.add(r.mean_failed_gpus);
    max_groups.add(static_cast<double>(r.max_failed_groups));
    slow_episodes.add(static_cast<double>(r.slow_episodes));
    mean_slow.add(r.mean_slow_gpus);
    for (std::size_t i = 0; i < n; ++i) {
      const PolicyOutcome& o = r.policies[i];
      loss[i].add(o.throughput_loss);
      goodput[i].add(o.goodput);
      energy[i].add(o.energy_mwh);
      epw[i].add(o.energy_per_work);
      paused[i].add(o.paused_hours);
      pauses[i].add(o.pauses);
      down[i].add(o.down_hours);
      restarts[i].add(o.restarts);
      spares[i].add(o.spares_needed);
      slow_loss[i].add(o.fail_slow_loss);
      // Without active fail-slow the run is its own run without it.
      const double slow_goodput = slow_on ? base.policies[i].goodput - o.goodput : 0.0;
      slow_goodput_loss[i].add(slow_goodput);
      if (records != nullptr) records->push_back({t, c.run.policies[i].name(), o, slow_goodput});
    }
    live.failures += r.live_recovery.failures;
    live.repairs += r.live_recovery.repairs;
    live.sum += r.live_recovery.sum;
    if (t == 0) out.series = std::move(r.series);
    if (progress) progress(t + 1, c.run.trials);
  }
  out.trials = c.run.trials;
  out.days = c.run.days;
  if (c.run.trials > 0) {
    const double trials = c.run.trials;
    out.recovery.failures_per_trial = static_cast<double>(live.failures) / trials;
    out.recovery.repairs_per_trial = static_cast<double>(live.repairs) / trials;
  }
  if (const double events = static_cast<double>(live.failures + live.repairs); events > 0) {
    RecoveryCost& m = out.recovery.mean;
    m.lost_step_s = live.sum.lost_step_s / events;
    m.detect_s = live.sum.detect_s / events;
    m.agree_s = live.sum.agree_s / events;
    m.rebuild_s = live.sum.rebuild_s / events;
    m.reshard_s = live.sum.reshard_s / events;
    m.total_s = live.sum.total_s / events;
  }
  out.failures = failures.get();
  out.mean_failed_gpus = mean_failed.get();
  out.max_failed_groups = max_groups.get();
  out.fail_slow = slow_on;
  out.slow_episodes = slow_episodes.get();
  out.mean_slow_gpus = mean_slow.get();
  out.step_seconds = sim.workload().step(c.parallel.tp, c.parallel.tp).total_s;
  out.workload_note = moe_note(c);
  out.checkpoint_interval_s = sim.checkpoint_interval_s();
  for (std::size_t i = 0; i < n; ++i) {
    PolicySummary p;
    p.name = c.run.policies[i].name();
    p.throughput_loss = loss[i].get();
    p.goodput = goodput[i].get();
    p.energy_mwh = energy[i].get();
    p.energy_per_work = epw[i].get();
    p.paused_hours = paused[i].get();
    p.pauses = pauses[i].get();
    p.down_hours = down[i].get();
    p.restarts = restarts[i].get();
    p.spares_needed = spares[i].get();
    p.fail_slow_loss = slow_loss[i].get();
    p.fail_slow_goodput_loss = slow_goodput_loss[i].get();
    out.policies.push_back(p);
  }
  out.wall_seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return out;
}

std::string moe_note(const SimConfig& c) {
  const ModelConfig& m = c.model;
  if (!m.moe()) return "";
  const int t = c.parallel.min_degree;
  char buf[512];
  if (m.experts_whole) {
    std::snprintf(buf, sizeof(buf),
                  "MoE: %d experts, top %d, whole experts per GPU (expert parallelism; the NTP "
                  "policies are nonuniform expert parallelism, NEP); at TP %d the busiest GPU "
                  "holds %lld experts against %.2f ideal (%.2fx)\n",
                  m.experts, m.top_k, t,
                  static_cast<long long>(shard::max_units_per_rank(m.experts, t)),
                  static_cast<double>(m.experts) / t,
                  static_cast<double>(shard::max_units_per_rank(m.experts, t)) * t / m.experts);
  } else {
    std::snprintf(buf, sizeof(buf),
                  "MoE: %d experts, top %d, every expert's columns split over the TP group "
                  "(expert tensor parallelism)\n",
                  m.experts, m.top_k);
  }
  return buf;
}

std::string format_table(const Summary& s) {
  std::ostringstream os;
  char buf[512];
  if (!s.label.empty()) os << "== " << s.label << " ==\n";
  std::snprintf(buf, sizeof(buf),
                "%d trial(s) x %.1f days; failures/trial %.1f +-%.1f; mean failed GPUs %.1f; "
                "max failed TP groups %.0f (mean of trial maxima %.1f)\n"
                "failure-free step %.2f s; checkpoint interval (Young/Daly) %.1f min\n",
                s.trials, s.days, s.failures.mean, s.failures.ci95, s.mean_failed_gpus.mean,
                s.max_failed_groups.max, s.max_failed_groups.mean, s.step_seconds,
                s.checkpoint_interval_s / 60.0);
  os << buf << s.workload_note;
  std::snprintf(buf, sizeof(buf), "%-14s %-17s %-17s %10s %9s %8s %8s %9s %s\n", "policy",
                "throughput loss", "goodput", "energy MWh", "MWh/work", "pauses", "paused h",
                "down h", "spares for pause-free (mean/max)");
  os << buf;
  for (const PolicySummary& p : s.policies) {
    // A policy that did no useful work (paused for the whole run) has no energy per work.
    char per_work[32] = "no work";
    if (std::isfinite(p.energy_per_work.mean)) {
      std::snprintf(per_work, sizeof(per_work), "%.3f", p.energy_per_work.mean);
    }
    std::snprintf(buf, sizeof(buf), "%-14s %-17s %-17s %10.1f %9s %8.1f %8.1f %9.1f %.1f / %.0f\n",
                  p.name.c_str(), pct(p.throughput_loss).c_str(), pct(p.goodput).c_str(),
                  p.energy_mwh.mean, per_work, p.pauses.mean, p.paused_hours.mean,
                  p.down_hours.mean, p.spares_needed.mean, p.spares_needed.max);
    os << buf;
  }
  os << format_recovery(s.recovery);
  return os.str();
}

std::string format_snapshot_table(const std::vector<std::string>& names,
                                  const std::vector<SnapshotResult>& rows) {
  std::ostringstream os;
  char buf[128];
  std::snprintf(buf, sizeof(buf), "%-10s %-8s", "failed %", "GPUs");
  os << buf;
  for (const std::string& n : names) {
    std::snprintf(buf, sizeof(buf), " %14s", n.c_str());
    os << buf;
  }
  os << "   (throughput loss; spare domains for the full batch in brackets)\n";
  for (const SnapshotResult& r : rows) {
    std::snprintf(buf, sizeof(buf), "%-10.4g %-8lld", 100 * r.failed_fraction,
                  static_cast<long long>(r.failed_gpus));
    os << buf;
    for (std::size_t i = 0; i < names.size(); ++i) {
      std::snprintf(buf, sizeof(buf), " %7.2f%% [%4.0f]", 100 * r.loss[i], r.spare_domains[i]);
      os << buf;
    }
    os << "\n";
  }
  return os.str();
}

namespace {

// One block of the fail-slow table: a row per summary, `value` and `[in brackets]` per policy.
void fail_slow_block(std::ostringstream& os, const std::vector<Summary>& summaries,
                     const char* title, MetricStat PolicySummary::*value,
                     MetricStat PolicySummary::*bracket) {
  char buf[128];
  os << title << "\n";
  std::snprintf(buf, sizeof(buf), "%-34s %9s %9s", "sweep", "episodes", "slow GPUs");
  os << buf;
  for (const PolicySummary& p : summaries.front().policies) {
    std::snprintf(buf, sizeof(buf), " %17s", p.name.c_str());
    os << buf;
  }
  os << "\n";
  for (const Summary& s : summaries) {
    std::snprintf(buf, sizeof(buf), "%-34s %9.1f %9.2f", s.label.empty() ? "-" : s.label.c_str(),
                  s.slow_episodes.mean, s.mean_slow_gpus.mean);
    os << buf;
    for (const PolicySummary& p : s.policies) {
      // A difference of two sums that agree to rounding (1e-16) prints as 0.00, not -0.00.
      const double b = std::fabs((p.*bracket).mean) < 1e-12 ? 0.0 : (p.*bracket).mean;
      std::snprintf(buf, sizeof(buf), " %7.2f%% [%6.2f]", 100 * (p.*value).mean, 100 * b);
      os << buf;
    }
    os << "\n";
  }
}

}  // namespace

std::string format_fail_slow_table(const std::vector<Summary>& summaries) {
  if (std::none_of(summaries.begin(), summaries.end(),
                   [](const Summary& s) { return s.fail_slow; }))
    return "";
  std::ostringstream os;
  fail_slow_block(
      os, summaries,
      "fail-slow: throughput loss per policy, [in brackets] the points of it due to fail-slow",
      &PolicySummary::throughput_loss, &PolicySummary::fail_slow_loss);
  os << "\n";
  fail_slow_block(os, summaries,
                  "fail-slow: goodput per policy, [in brackets] the points of goodput fail-slow "
                  "cost (the same trials without it minus this; restarts included)",
                  &PolicySummary::goodput, &PolicySummary::fail_slow_goodput_loss);
  return os.str();
}

std::string safe_label(const std::string& label) {
  std::string out;
  for (char ch : label) {
    const bool ok = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') ||
                    (ch >= '0' && ch <= '9') || ch == '-' || ch == '.';
    out += ok ? ch : '_';
  }
  return out;
}

namespace {
std::string series_name(const Summary& s) {
  return s.label.empty() ? "series.csv" : "series-" + safe_label(s.label) + ".csv";
}
Status make_dir(const std::string& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return invalid_argument("cannot create directory '" + dir + "': " + ec.message());
  return ok_status();
}

// Writes `path`: `header`, then one line per policy of each sweep, which starts with the sweep's
// label, the policy's name, the trials and the days, and goes on with what `rest` writes.
template <typename Rest>
Status write_policy_rows(const std::string& path, const char* header,
                         const std::vector<Summary>& summaries, Rest rest) {
  std::ofstream out(path);
  if (!out) return internal_error("cannot write " + path);
  out << header;
  for (const Summary& s : summaries) {
    for (const PolicySummary& p : s.policies) {
      out << s.label << ',' << p.name << ',' << s.trials << ',' << s.days << ',';
      rest(out, s, p);
      out << '\n';
    }
  }
  return ok_status();
}

}  // namespace

Status write_csv(const std::string& dir, const std::vector<Summary>& summaries,
                 const std::vector<std::string>& names) {
  NTP_RETURN_IF_ERROR(make_dir(dir));
  NTP_RETURN_IF_ERROR(write_policy_rows(
      dir + "/summary.csv",
      "sweep,policy,trials,days,throughput_loss,throughput_loss_ci95,goodput,goodput_ci95,"
      "energy_mwh,energy_per_work,pauses,paused_hours,down_hours,restarts,spares_needed_mean,"
      "spares_needed_max\n",
      summaries, [](std::ostream& out, const Summary&, const PolicySummary& p) {
        out << p.throughput_loss.mean << ',' << p.throughput_loss.ci95 << ',' << p.goodput.mean
            << ',' << p.goodput.ci95 << ',' << p.energy_mwh.mean << ',' << p.energy_per_work.mean
            << ',' << p.pauses.mean << ',' << p.paused_hours.mean << ',' << p.down_hours.mean << ','
            << p.restarts.mean << ',' << p.spares_needed.mean << ',' << p.spares_needed.max;
      }));
  if (std::any_of(summaries.begin(), summaries.end(),
                  [](const Summary& s) { return s.fail_slow; })) {
    NTP_RETURN_IF_ERROR(write_policy_rows(
        dir + "/fail_slow.csv",
        "sweep,policy,trials,days,slow_episodes,mean_slow_gpus,throughput_loss,"
        "throughput_loss_ci95,fail_slow_loss,fail_slow_loss_ci95,goodput,goodput_ci95,"
        "fail_slow_goodput_loss,fail_slow_goodput_loss_ci95\n",
        summaries, [](std::ostream& out, const Summary& s, const PolicySummary& p) {
          out << s.slow_episodes.mean << ',' << s.mean_slow_gpus.mean << ','
              << p.throughput_loss.mean << ',' << p.throughput_loss.ci95 << ','
              << p.fail_slow_loss.mean << ',' << p.fail_slow_loss.ci95 << ',' << p.goodput.mean
              << ',' << p.goodput.ci95 << ',' << p.fail_slow_goodput_loss.mean << ','
              << p.fail_slow_goodput_loss.ci95;
        }));
  }
  for (const Summary& s : summaries) {
    if (s.series.empty()) continue;
    const std::string spath = dir + "/" + series_name(s);
    std::ofstream so(spath);
    if (!so) return internal_error("cannot write " + spath);
    so << "hours,failed_gpus,failed_tp_groups";
    for (const std::string& n : names) so << ',' << n;
    so << '\n';
    for (const SeriesPoint& p : s.series) {
      so << p.hours << ',' << p.failed_gpus << ',' << p.failed_groups;
      for (double v : p.capacity) so << ',' << v;
      so << '\n';
    }
  }
  return ok_status();
}

Status write_plots(const std::string& dir, const std::vector<Summary>& summaries,
                   const std::vector<std::string>& names, const std::string& sweep_key) {
  NTP_RETURN_IF_ERROR(write_csv(dir, summaries, names));
  // (file base name, gnuplot commands) per plot; each is drawn as SVG and as PNG.
  std::vector<Plot> plots;
  for (const Summary& s : summaries) {
    if (s.series.empty()) continue;
    std::ostringstream body;
    body << "set title 'useful work per interval, trial 0" << (s.label.empty() ? "" : ", ")
         << s.label << "'\nset xlabel 'hours'\nset ylabel 'work / failure-free work'\n"
         << "set xtics autofreq\nplot ";
    for (std::size_t i = 0; i < names.size(); ++i) {
      body << (i ? ", " : "") << "'" << dir << "/" << series_name(s) << "' using 1:" << (4 + i)
           << " with steps title '" << names[i] << "'";
    }
    body << "\n";
    plots.emplace_back(s.label.empty() ? "capacity" : "capacity-" + safe_label(s.label),
                       body.str());
  }
  if (summaries.size() > 1) {
    const std::string data = dir + "/goodput.dat";
    std::ofstream d(data);
    for (std::size_t k = 0; k < summaries.size(); ++k) {
      d << k;
      for (const PolicySummary& p : summaries[k].policies) d << ',' << p.goodput.mean;
      d << ',' << summaries[k].label << '\n';
    }
    std::ostringstream body;
    body << "set title 'goodput vs " << sweep_key << "'\nset xlabel '" << sweep_key
         << "'\nset ylabel 'goodput'\nset xtics (";
    for (std::size_t k = 0; k < summaries.size(); ++k) {
      const std::string& l = summaries[k].label;
      body << (k ? ", " : "") << "'" << l.substr(l.find('=') + 1) << "' " << k;
    }
    body << ")\nplot ";
    for (std::size_t i = 0; i < names.size(); ++i) {
      body << (i ? ", " : "") << "'" << data << "' using 1:" << (2 + i)
           << " with linespoints title '" << names[i] << "'";
    }
    body << "\n";
    plots.emplace_back("goodput", body.str());
  }
  return render_plots(dir, "set datafile separator ','\nset key outside right\nset grid\n", plots);
}

}  // namespace ntp::sim
