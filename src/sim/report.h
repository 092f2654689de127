// Monte Carlo aggregation and the human/CSV/plot outputs of `ntp sim`.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "core/status.h"
#include "sim/engine.h"
#include "sim/snapshot.h"

namespace ntp::sim {

struct MetricStat {
  double mean = 0, ci95 = 0, max = 0;
};

struct PolicySummary {
  std::string name;
  MetricStat throughput_loss, goodput, energy_mwh, energy_per_work, paused_hours, pauses,
      down_hours, restarts, spares_needed;
  MetricStat fail_slow_loss;  // the part of throughput_loss due to fail-slow
  // Goodput of the same trials without fail-slow (Simulator::without_fail_slow) minus goodput:
  // what fail-slow costs with its transients (DROP's restarts and re-formations) included.
  MetricStat fail_slow_goodput_loss;
};

// What NTP-LIVE's recoveries cost (sim/recovery_cost.h), for the report.
struct RecoverySummary {
  bool modelled = false;      // false: a fixed recovery.live_recovery_seconds (or no live policy)
  double fixed_seconds = -1;  // recovery.live_recovery_seconds
  int tp = 0, degraded = 0;   // the typical event: one GPU of a healthy cluster fails
  RecoveryCost failure, repair;                          // its breakdown, and that of its repair
  double failures_per_trial = 0, repairs_per_trial = 0;  // events the engine priced
  RecoveryCost mean;               // mean per priced event (failures and repairs) over all trials
  ControlPlaneInfo control_plane;  // what priced detect, agree and rebuild
};

// The typical events of `sim` (no trials run); `modelled` false without a cost model.
RecoverySummary typical_recovery(const Simulator& sim);
// One paragraph: what priced the control plane, the breakdown of the typical failure and repair,
// and the trials' mean.
std::string format_recovery(const RecoverySummary& recovery);
// One line: the control-plane model ("curve": the file, its domain size, its range and whether
// the cluster's GPU count is inside it; "ops-model": and why, when it was a fallback).
std::string format_control_plane(const ControlPlaneInfo& info);

struct Summary {
  std::string label;  // the sweep point ("" without a sweep)
  int trials = 0;
  double days = 0;
  MetricStat failures, mean_failed_gpus, max_failed_groups;
  std::int64_t events = 0;
  double wall_seconds = 0;
  double step_seconds = 0;           // failure-free step time
  std::string workload_note;         // a MoE's experts and their placement (empty: dense)
  double checkpoint_interval_s = 0;  // Young/Daly
  std::vector<PolicySummary> policies;
  std::vector<SeriesPoint> series;  // trial 0, when recorded
  RecoverySummary recovery;
  bool fail_slow = false;  // fail_slow.active(): the fail-slow table and fields apply
  MetricStat slow_episodes, mean_slow_gpus;
};

// One policy's outcome in one trial: the values the summary's means are taken over.
struct TrialRecord {
  int trial = 0;
  std::string policy;
  PolicyOutcome outcome;
  double fail_slow_goodput_loss = 0;  // as in PolicySummary; 0 without active fail-slow
};

// Runs config.run.trials trials (trial 0 records its time series when `series` is set);
// `progress(done, total)` is called after each trial when given. With fail-slow active every trial
// also runs without it (same failure trajectory) for fail_slow_goodput_loss. With `records`, one
// record per trial and policy is appended to it, trial by trial in policy order.
Summary run_monte_carlo(const Simulator& sim, bool series,
                        const std::function<void(int, int)>& progress = {},
                        std::vector<TrialRecord>* records = nullptr);

// A fixed-width table, one row per policy, means with +- 95% half-widths.
// The line the summary prints for a MoE workload (its experts and, with whole experts, the
// busiest GPU's share at parallel.min_degree against the ideal); empty for a dense model.
std::string moe_note(const SimConfig& c);

std::string format_table(const Summary& summary);
std::string format_snapshot_table(const std::vector<std::string>& policy_names,
                                  const std::vector<SnapshotResult>& rows);
// The fail-slow table: one row per summary (sweep point), one column per policy: throughput loss
// with, in brackets, the percentage points of it due to fail-slow; then the same rows for goodput
// with, in brackets, the points of goodput fail-slow cost. Empty when no summary has fail-slow
// active (so a run without it prints what it always printed).
std::string format_fail_slow_table(const std::vector<Summary>& summaries);

// CSV files under `dir` (created): summary.csv (one row per sweep point and policy),
// series[-<label>].csv (trial 0's time series) and, when a summary has fail-slow active,
// fail_slow.csv (the fail-slow table: one row per sweep point and policy).
Status write_csv(const std::string& dir, const std::vector<Summary>& summaries,
                 const std::vector<std::string>& policy_names);
// A gnuplot script and its SVG output under `dir`: capacity over time per policy for each sweep
// point, and goodput against the sweep value when there is more than one point. Returns
// kFailedPrecondition (the caller prints it as a note) when gnuplot is not installed.
Status write_plots(const std::string& dir, const std::vector<Summary>& summaries,
                   const std::vector<std::string>& policy_names, const std::string& sweep_key);

// File-name-safe form of a sweep label ("rate_multiplier=2" -> "rate_multiplier_2").
std::string safe_label(const std::string& label);

}  // namespace ntp::sim
