// Calibration of the recovery cost model (sim/recovery_cost.h) from a run of the ntp runtime.
//
// `ntp train --metrics FILE` writes one {"type":"recovery"} line per live reconfiguration
// (docs/recovery.md "Events": detect_s, agree_s, rebuild_s, reshard_s, total_s, reshard_bytes
// received by the leader, old_degrees, degrees, cause) and one {"type":"step"} line per step.
// calibrate() prices every event with the model on the run's exact cluster (its degrees per
// domain, the config's model and state bytes), fits the constants, and returns predicted beside
// measured per event. Fits (each from the events that carry the quantity):
//   detect_kill_seconds  mean(detect_s) - step/2 over signalled failures (the runtime's detect_s
//                        starts at the failed step, so it holds the lost partial step);
//                        detect_hang_seconds the same over timeouts;
//   store_rtt_seconds    mean(agree_s) / agree_round_trips over repairs (no stale wait);
//   heartbeat_stale_seconds  mean(agree_s) - round trips + detect over failures;
//   formation_seconds    mean(rebuild_s): one formation of the new groups per event;
//   reshard_gbytes_per_s  sum of the busiest GPU's bytes / sum of reshard_s (one effective
//                        bandwidth for both links: the CPU runtime's are loopback TCP alike).
// These are the ops-per-member model's constants: the calibration prices with
// recovery.control_plane = "ops-model" whatever the config says, and its overrides set it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"
#include "sim/config.h"
#include "sim/recovery_cost.h"

namespace ntp::sim {

struct MeasuredRecovery {
  std::string cause;
  bool repair = false, hang = false;
  std::vector<int> old_degrees, degrees;
  double detect_s = 0, agree_s = 0, rebuild_s = 0, reshard_s = 0, total_s = 0;
  // Bytes the leader received (metrics written before the runtime reported job totals), else -1.
  std::int64_t reshard_bytes = 0;
  // Bytes received by the rank that received most (newer metrics), else -1.
  std::int64_t busiest_rank_bytes = -1;
};

struct RuntimeMetrics {
  std::vector<MeasuredRecovery> events;
  double median_step_s = 0;  // of the run's step lines
};

// Reads a metrics JSON-lines file. kInvalidArgument naming the line when it is not JSON or a
// recovery line lacks a field; a file without recovery lines is an error too.
Result<RuntimeMetrics> read_runtime_metrics(const std::string& path);

struct CalibrationRow {
  MeasuredRecovery measured;
  RecoveryCost predicted;                   // with the fitted constants
  std::int64_t predicted_leader_bytes = 0;  // what the plan moves into the leader's slot
};

struct Calibration {
  RecoveryConfig fitted;           // the config's [recovery] with the fitted constants
  double step_s = 0;               // the run's median step (the lost half step)
  double reshard_bytes_per_s = 0;  // fitted effective reshard bandwidth, both links
  std::vector<CalibrationRow> rows;
  std::vector<std::string> set_lines;  // "recovery.key=value" overrides reproducing the fit
};

// `config` must describe the runtime's job: model shape (model.vocab included), parallel.tp =
// the domain size, recovery.state_bytes_per_param = 12 for its fp32 weights and moments.
Result<Calibration> calibrate(const SimConfig& config, const RuntimeMetrics& metrics);

// A table: per event measured / predicted seconds per phase and bytes, then the fitted constants.
std::string format_calibration(const Calibration& calibration);

}  // namespace ntp::sim
