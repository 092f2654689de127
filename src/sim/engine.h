// The event-driven simulator: one trial of the cluster over `days` under every policy at once.
//
// Events (failures, repairs, time-series samples) come from a priority queue; between events the
// state is constant, so each policy's capacity, useful work and energy are integrated exactly over
// the interval. All policies see the same failure trajectory (common random numbers), which makes
// their differences far less noisy than independent runs. Per trial the failure stream is
// rng.fork(trial) of the seed, so results are deterministic per (seed, trial).
//
// Transients per failure (policies.h): restart-based policies lose the work since the last
// checkpoint (checkpoints every Young/Daly interval tau = sqrt(2 x write x MTBF) of up time) and
// are down for the restart (+ hardware replacement for CKPT-RESTART); NTP-LIVE is down for the
// live recovery of every failure and degree-changing repair (sim/recovery_cost.h, or a fixed
// recovery.live_recovery_seconds per failure and repair) and loses nothing else. Every policy pays
// the checkpoint overhead write / (tau + write) while it runs. Repaired hardware rejoins without a
// restart for the other policies.
// Fixed-batch mode: a policy pauses while its need for spare groups exceeds the spares it has
// (sim.spares domains, or n for SPARES(n)) plus the slack allowed by target_batch_fraction.
// Fail-slow (when fail_slow.active()): episodes from SlowProcess on its own stream
// rng.fork(trial).fork(kSlowStream) start and end in the same queue; each policy's rates are its
// fail-stop rates adjusted by SlowState under its mitigation, and the engine integrates both, so
// the throughput loss due to fail-slow is measured on the same trajectory. A DROP that takes a GPU
// out changes what runs like a failure: restart-based policies restart (lost work, restart
// minutes, CKPT-RESTART's replacement too) when a drop lowers a group's degree (NTP-like), stops a
// running replica (DP-DROP, SPARES) or swaps a GPU (CKPT-RESTART), and its return is free, as a
// repair is; live policies pay a planned re-formation each way (RecoveryCostModel::event priced
// as a repair: no detection or lost step, the runtime picks the step boundary; or the fixed
// live_recovery_seconds). Other reactions are free. Without active fail-slow nothing of this runs
// and the results are those of the fail-stop engine, bit for bit.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "core/rng.h"
#include "core/status.h"
#include "power/power_model.h"
#include "sim/config.h"
#include "sim/failures.h"
#include "sim/recovery_cost.h"
#include "sim/workload.h"

namespace ntp::sim {

struct PolicyOutcome {
  double throughput_loss = 0;  // 1 - mean steady capacity / failure-free (no transients, pauses)
  double goodput = 0;          // useful work / failure-free work, all losses included
  double energy_mwh = 0;
  double energy_per_work = 0;  // energy per unit of useful work, relative to failure-free
  double paused_hours = 0;
  double down_hours = 0;  // restarts and live recoveries
  int pauses = 0;
  int restarts = 0;
  int spares_needed = 0;  // spare domains for pause-free training at the full batch
  // The part of throughput_loss due to fail-slow: (capacity without the slowed GPUs - capacity)
  // integrated / failure-free (0 without fail-slow).
  double fail_slow_loss = 0;
};

struct SeriesPoint {
  double hours = 0;
  std::int64_t failed_gpus = 0, failed_groups = 0;
  // Per policy: useful work delivered in the sample interval ending at `hours`, as a fraction of
  // the failure-free cluster's (restarts, lost work, pauses and checkpoints included).
  std::vector<double> capacity;
};

// The live recoveries NTP-LIVE paid for in [0, days): their number and summed breakdown.
struct RecoveryTotals {
  std::int64_t failures = 0, repairs = 0;
  RecoveryCost sum;  // seconds and bytes summed over the events
};

struct TrialResult {
  std::vector<PolicyOutcome> policies;  // in config.run.policies order
  std::int64_t events = 0;              // failures and repairs processed (warm-up included)
  std::int64_t failures = 0;            // failure events in [0, days) that changed the state
  double mean_failed_gpus = 0;
  std::int64_t max_failed_groups = 0;
  std::int64_t slow_episodes = 0;   // fail-slow episodes started in [0, days) on a GPU not slow
  double mean_slow_gpus = 0;        // time-averaged GPUs in an episode over [0, days)
  std::vector<SeriesPoint> series;  // only when requested
  RecoveryTotals live_recovery;     // priced by the cost model (empty with a fixed cost)
};

// The key of the fail-slow stream: rng.fork(trial).fork(kSlowStream).
inline constexpr std::uint64_t kSlowStream = 0x51077ULL;

class Simulator {
 public:
  // `config` must be validated. A trace (failures.trace) is loaded here.
  static Result<Simulator> create(const SimConfig& config);

  TrialResult run_trial(int trial, bool record_series) const;
  // This simulator with fail-slow off (fail_slow.enabled = false), the same trace and cost model.
  // Its trial k sees this one's failure trajectory (the fail-slow stream is a separate fork), so
  // the difference of two trials' results is what fail-slow costs, transients included.
  Simulator without_fail_slow() const;
  const Workload& workload() const { return workload_; }
  const SimConfig& config() const { return config_; }
  // Young/Daly checkpoint interval in seconds (infinite without failures, 0 for free writes).
  double checkpoint_interval_s() const { return tau_s_; }
  // The interval `policy` uses: a restart-based +DROP also restarts for every episode it drops,
  // so its interval counts those episodes' rate too.
  double checkpoint_interval_s(const PolicySpec& policy) const;
  // The cost model NTP-LIVE uses; null with a fixed recovery.live_recovery_seconds or when no
  // policy recovers live.
  const RecoveryCostModel* recovery_model() const { return recovery_ ? &*recovery_ : nullptr; }

 private:
  Simulator(const SimConfig& config, std::vector<FailureEvent> trace, bool use_trace);

  SimConfig config_;
  Workload workload_;
  power::PowerModel power_model_;
  std::vector<FailureEvent> trace_;
  bool use_trace_;
  double tau_s_ = 0;
  double failure_rate_ = 0, drop_rate_ = 0;  // per second over the cluster
  std::optional<RecoveryCostModel> recovery_;
};

}  // namespace ntp::sim
