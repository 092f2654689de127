// RecoveryCostModel: what one live reconfiguration of NTP-LIVE costs, from the same quantities the
// ntp runtime spends it on (docs/recovery.md "The protocol"), instead of a fixed number.
//
// Per event (seconds of cluster-wide stall; every replica waits for the re-formed job):
//   lost step  failures only: the step in flight is redone; on average half a healthy step
//              (Workload::step) was done when the failure hit.
//   detect     failures only: (1 - hang_fraction) x detect_kill_seconds (the death is signalled:
//              process exit, connection reset, NCCL async error, the agent's heartbeat) +
//              hang_fraction x detect_hang_seconds (nothing is signalled: the collective timeout),
//              each at least the notice's fan-out: notice_store_ops_per_member x members /
//              store_ops_per_s (members: one per GPU).
//   agree      agree_round_trips x store_rtt_seconds, or the agreement's store operations
//              (agree_store_ops_per_member x members / store_ops_per_s) when longer; after a
//              failure the decider also waits
//              until the dead member's heartbeat is heartbeat_stale_seconds old, a wait that runs
//              concurrently with detection: max(0, heartbeat_stale_seconds - detect).
//   rebuild    one formation of the new layout's groups over shared links (comm/pair_mesh.h):
//              formation_seconds, or formation_store_ops_per_member x members / store_ops_per_s
//              when longer. The number of groups does not count: they share their links.
//   reshard    the layout algebra's plan: shard::plan_cluster before and after (fold strategy,
//              keeping units where they are) and shard::plan_reshard between them, with the
//              model's unit spaces (heads, FFN blocks, vocabulary when pp = 1) for one pipeline
//              stage, state_bytes_per_param bytes per parameter. Each GPU's time is its larger
//              direction of intra-domain traffic over the reshard bandwidth plus its larger
//              direction of DP-peer traffic (units whose only local copy died) over the
//              scale-out link; the reshard takes as long as the busiest GPU.
// Repairs cost agree + rebuild + reshard (the joiner is admitted at a step boundary).
//
// With recovery.control_plane = "curve" (the default when configs/sim/control_plane_curve.json
// loads) the detect, agree and rebuild phases come instead from control_plane_sim's curve
// (sim/control_plane_curve.h: the protocol's own machines with the domain hierarchy, simulated at
// whole NVL72-domain GPU counts), interpolated log-log at system.gpus:
//   detect     kill: max(detect_kill_seconds, the kill's abort_all_s) (the simulation posts the
//              exit notice at the fault; detect_kill_seconds is how long a real failure takes to
//              surface at all); hang: detect_hang_seconds + (the hang's abort_all_s - the curve's
//              hang_detect_s), i.e. the configured threshold plus what the protocol adds past its
//              own (beat lag, the fan-out), so the curve's figure when the thresholds agree.
//   agree      the fault's agree_s: the agreement as run, its waits for stale members included
//              (no heartbeat_stale_seconds term); weighted by hang_fraction like detect.
//   rebuild    the fault's form_s (no formation_seconds floor).
// Repairs take the kill's agree_s and form_s. The store_*, *_store_ops_per_member,
// agree_round_trips and formation_seconds keys apply to "ops-model" only: the curve's store is
// control_plane_sim's (one per domain plus the leaders' global one).
//
// The reshard is planned on a representative cluster rather than the whole one: the changed
// TP group (degree from -> to), a group at the lowest degree among the other running groups
// (when below tp: it sets the fold's sync degree) and a healthy group. Every group of the real
// cluster re-lays out exactly like one of these (the fold layout of a replica depends only on its
// degree and the sync degree), and all reshards run in parallel, so the busiest GPU is the same.
// Plans are cached per (from, to, others' lowest degree). Failed slots are the highest slot
// indexes of a group: GPUs idled by parallel.degree_multiple rounding count as gone with the
// failed one (they share its tray), so their units come from DP peers.
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <tuple>
#include <vector>

#include "core/status.h"
#include "shard/unit_space.h"
#include "sim/config.h"

namespace ntp::sim {

// What a reshard moves and how long the busiest GPU takes.
struct ReshardEstimate {
  double seconds = 0;
  std::int64_t busiest_gpu_bytes = 0;    // bytes into or out of the GPU that takes longest
  std::int64_t changed_group_bytes = 0;  // bytes received by the GPUs of the changed group
  std::int64_t dp_peer_bytes = 0;        // of those, from DP peers (scale-out)
};

// One reconfiguration, broken down. total_s = lost_step_s + detect_s + agree_s + rebuild_s +
// reshard_s.
struct RecoveryCost {
  double lost_step_s = 0, detect_s = 0, agree_s = 0, rebuild_s = 0, reshard_s = 0, total_s = 0;
  std::int64_t busiest_gpu_bytes = 0, changed_group_bytes = 0, dp_peer_bytes = 0;

  // Field by field, seconds and bytes: the sum over events.
  RecoveryCost& operator+=(const RecoveryCost& o);
};

// A TP group whose running degree changed (0 = it cannot run).
struct DegreeChange {
  std::int64_t group = 0;
  int from = 0, to = 0;
};

// What priced the control-plane phases (detect, agree, rebuild), for the report.
struct ControlPlaneInfo {
  std::string model;                      // "curve" or "ops-model"
  std::string note;                       // why ops-model when recovery.control_plane was not set
  std::string curve;                      // the curve's file (curve)
  std::string curve_commit;               // the commit that generated it
  int domain = 0;                         // the curve's domain size (curve)
  std::int64_t gpus = 0;                  // the cluster's, where the curve is read
  std::int64_t lo_gpus = 0, hi_gpus = 0;  // the curve's range
  bool extrapolated = false;              // gpus outside [lo_gpus, hi_gpus]
};

class RecoveryCostModel {
 public:
  // kInvalidArgument naming the key when the model cannot be laid out (hidden not a multiple of
  // heads, fewer heads than parallel.tp, ...).
  static Result<RecoveryCostModel> create(const SimConfig& config);

  // The cost of one event. `failure`: a failure (else a repair). `changes`: the groups the event
  // touched, with their running degree before and after. A failure in a group that keeps its
  // degree still re-forms the job and moves one rank's state from DP peers to the GPU that takes
  // over; a repair that changes no degree, or a failure in a group that was not running, costs
  // nothing. Several changed groups reshard at once: the slowest sets the time. `others_min`: the
  // lowest degree among the running groups not in `changes` (tp when there are none).
  RecoveryCost event(bool failure, const std::vector<DegreeChange>& changes, int others_min) const;

  // The breakdown of one event whose reshard is `reshard`, with a lost half step of `step_s`
  // for failures.
  RecoveryCost price(bool failure, const ReshardEstimate& reshard, double step_s) const;

  // The reshard of one group from degree `from` to `to` (cached).
  ReshardEstimate group_reshard(int from, int to, int others_min) const;

  // The reshard of a whole job with degrees[d] per domain before and after (calibration against
  // the runtime: exact for its small clusters). `into_first_slot`, when given, receives the bytes
  // the plan moves into slot 0 of domain 0 (the runtime's leader, world rank 0, reports those).
  Result<ReshardEstimate> cluster_reshard(const std::vector<int>& from_degrees,
                                          const std::vector<int>& to_degrees,
                                          std::int64_t* into_first_slot = nullptr) const;

  const ControlPlaneInfo& control_plane() const { return control_plane_; }
  const std::vector<shard::UnitSpace>& spaces() const { return spaces_; }
  double healthy_step_s() const { return step_s_; }
  // Per-GPU bandwidths in bytes/s: intra-domain reshard, DP-peer (scale-out).
  double scale_up_bytes_per_s() const { return up_bps_; }
  double scale_out_bytes_per_s() const { return out_bps_; }

  RecoveryCostModel(const RecoveryCostModel& other);
  RecoveryCostModel& operator=(const RecoveryCostModel& other);

 private:
  RecoveryCostModel() = default;
  Result<ReshardEstimate> plan(const std::vector<int>& from_degrees,
                               const std::vector<int>& to_degrees,
                               std::int64_t* into_first_slot) const;
  // detect_s, agree_s and rebuild_s of `c` from the store operations per member.
  void price_ops_model(bool failure, RecoveryCost& c) const;
  // Every unit of a stage at `degree` fetched from DP peers (a replica coming back).
  ReshardEstimate full_fetch(int degree) const;

  RecoveryConfig r_;
  ControlPlaneInfo control_plane_;
  ControlPlanePhases kill_, hang_;  // the curve's phases at the cluster's GPU count (curve)
  int tp_ = 1;
  int pp_ = 1;
  double members_ = 1;  // control-plane members: one worker per GPU
  double step_s_ = 0, up_bps_ = 1, out_bps_ = 1;
  std::vector<shard::UnitSpace> spaces_;
  mutable std::mutex mutex_;
  mutable std::map<std::tuple<int, int, int>, ReshardEstimate> cache_;
};

// The unit spaces of one pipeline stage of `model` (vocabulary only when pp = 1), as the layout
// algebra counts them. kInvalidArgument naming the key when hidden % heads != 0.
Result<std::vector<shard::UnitSpace>> stage_unit_spaces(const SimConfig& config);

}  // namespace ntp::sim
