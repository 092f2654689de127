// Simulator configuration: the TOML schema of `ntp sim --config FILE.toml`.
//
// Sections and keys (units in the key names; every key is optional unless marked, defaults below):
//   [model]     layers, hidden, heads, ffn_multiplier, sequence, global_batch_tokens,
//               ffn_unit_columns (FFN columns per indivisible unit), activation_bytes_per_elem,
//               vocab (vocabulary rows TP splits; 0 = none), experts, top_k,
//               expert_ffn_multiplier, expert_split ("whole" | "columns"; a MoE: experts > 0)
//   [parallel]  tp, pp, domain_size, min_degree, degree_multiple, microbatch_sequences,
//               distributed_optimizer, tp_overlap, dp_overlap
//   [system]    gpus, peak_tflops, efficiency, hbm_gb, scale_up_gbytes_per_s,
//               scale_out_gbits_per_s, tdp_watts, idle_power_fraction
//   [power]     headroom
//   [failures]  rate_per_gpu_day, rate_multiplier, hardware_fraction, hardware_repair_hours,
//               software_recovery_hours, blast_sizes, blast_weights, warm_start, trace
//   [recovery]  restart_minutes, checkpoint_write_seconds, replace_hours, live_recovery_seconds,
//               detect_kill_seconds, detect_hang_seconds, hang_fraction, heartbeat_stale_seconds,
//               agree_round_trips, store_rtt_seconds, store_ops_per_s,
//               notice_store_ops_per_member, agree_store_ops_per_member, formation_seconds,
//               formation_store_ops_per_member, reshard_gbytes_per_s, state_bytes_per_param,
//               control_plane, control_plane_curve
//   [fail_slow] enabled, rate_per_gpu_day, rate_multiplier, factors, factor_weights, mean_hours,
//               drop_below
//   [sim]       days, trials, seed, sample_hours, fixed_batch, target_batch_fraction, spares,
//               policies
// Unknown sections or keys, wrong types and out-of-range values are errors naming the key.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/status.h"
#include "sim/control_plane_curve.h"
#include "sim/policy.h"

namespace ntp::sim {

struct ModelConfig {
  int layers = 100;
  int hidden = 20480;
  int heads = 128;
  double ffn_multiplier = 4.0;
  int sequence = 16384;
  double global_batch_tokens = 16777216.0;
  int ffn_unit_columns = 1;
  // Activation bytes kept per (token x hidden element) per layer before dividing by the TP degree
  // (34 with sequence parallelism and selective recomputation, Korthikanti et al. 2022).
  double activation_bytes_per_elem = 34.0;
  // Vocabulary rows of the (tied) embedding that TP splits; only the reshard of NTP-LIVE counts
  // them, and only with pp = 1 (with pipelines they live in the first and last stage).
  int vocab = 0;
  // Mixture of Experts (0 experts: the dense FFN above). Each layer's FFN is `experts` routed
  // experts of expert_ffn_multiplier x hidden columns, top_k of them per token, spread over the TP
  // group (docs/sim.md "A MoE workload"): whole experts per GPU (expert_split "whole": expert
  // parallelism, so NTP's policies are nonuniform expert parallelism, NEP) or every expert's
  // columns split in units of ffn_unit_columns ("columns": expert tensor parallelism).
  int experts = 0;
  int top_k = 2;
  double expert_ffn_multiplier = 0.0;
  bool experts_whole = true;
  bool moe() const { return experts > 0; }
};

struct ParallelConfig {
  int tp = 32;
  int pp = 8;
  int domain_size = 32;
  int min_degree = 28;
  int degree_multiple = 4;  // a reduced degree is rounded down to a multiple of this
  int microbatch_sequences = 1;
  bool distributed_optimizer = true;  // optimizer state sharded over DP (ZeRO-1)
  double tp_overlap = 0.0;            // fraction of TP communication hidden behind compute
  double dp_overlap = 0.9;  // fraction of the backward pass the DP reduction can hide behind
};

struct SystemConfig {
  std::int64_t gpus = 32768;
  double peak_tflops = 2250.0;  // dense BF16 per GPU
  double efficiency = 0.45;     // achieved / peak for the GEMMs
  double hbm_gb = 189.0;
  double scale_up_gbytes_per_s = 1800.0;  // per GPU, NVLink
  double scale_out_gbits_per_s = 800.0;   // per GPU, network
  double tdp_watts = 1000.0;
  double idle_power_fraction = 0.2;  // powered but idle GPUs draw this fraction of TDP
};

struct PowerConfig {
  double headroom = 0.3;  // extra TDP fraction the rack gives each surviving GPU
};

struct FailureConfig {
  double rate_per_gpu_day = 419.0 / (16384.0 * 54.0);  // Llama 3 unexpected interruptions
  double rate_multiplier = 1.0;
  double hardware_fraction = 0.78;
  double hardware_repair_hours = 168.0;
  double software_recovery_hours = 3.0;
  // A failure takes down the aligned group of blast_sizes[i] GPUs around it with probability
  // blast_weights[i] (1 = one GPU, a node/tray size, domain_size = an NVLink spread).
  std::vector<int> blast_sizes = {1};
  std::vector<double> blast_weights = {1.0};
  bool warm_start = true;  // start from the stationary failed/repair state instead of all healthy
  std::string trace;       // CSV trace to replay instead of random failures (empty: none)
};

// Fail-slow events (sim/slow_events.h): a GPU runs at a fraction of its speed for a while, then
// recovers. Off unless `enabled`; defaults and their sources: docs/sim.md "Fail-slow".
struct FailSlowConfig {
  bool enabled = false;
  // Assumption: as often as the fail-stop interruptions of Llama 3 (no per-GPU fail-slow rate has
  // been published for GPU training fleets).
  double rate_per_gpu_day = 419.0 / (16384.0 * 54.0);
  double rate_multiplier = 1.0;
  // Speed factor of the slowed GPU, in (0, 1], drawn with probability factor_weights[i] (equal
  // weights when factor_weights is empty). 0.75 ~ 1 / 1.34, the mean slowdown of large jobs
  // under fail-slow that Alibaba's study (GREYHOUND, USENIX ATC '25) reports.
  std::vector<double> factors = {0.5, 0.75, 0.9};
  std::vector<double> factor_weights = {1.0, 2.0, 1.0};
  double mean_hours = 1.0;  // exponential duration (GREYHOUND: sub-minute to ~10 hours)
  double drop_below = 0.6;  // the DROP mitigation treats a GPU slower than this as failed
  // Fail-slow events happen at all (enabled with a positive rate).
  bool active() const { return enabled && rate_per_gpu_day * rate_multiplier > 0; }
};

struct RecoveryConfig {
  double restart_minutes = 10.0;           // job restart from a checkpoint
  double checkpoint_write_seconds = 30.0;  // blocking part of writing one checkpoint
  double replace_hours = 0.5;              // CKPT-RESTART: swap in replacement hardware
  // NTP-LIVE: >= 0 charges this fixed time per failure and per repair instead of the recovery
  // cost model (sim/recovery_cost.h), whose inputs follow. Defaults: docs/sim.md.
  double live_recovery_seconds = -1.0;
  double detect_kill_seconds = 1.0;      // a signalled failure (process exit, reset, NCCL error)
  double detect_hang_seconds = 30.0;     // a silent hang: the collective timeout (--timeout-ms)
  double hang_fraction = 0.1;            // failures that surface only as hangs
  double heartbeat_stale_seconds = 1.0;  // the agreement declares a silent member dead after
  int agree_round_trips = 4;             // store round trips of the agreement
  double store_rtt_seconds = 0.005;
  // The control plane's store load, from bench/elastic/control_plane_bench (docs/perf.md): the
  // store operations per member of the fault notice's fan-out and of the agreement, served at
  // store_ops_per_s (one redis-server on a host of its own). A phase lasts at least its ops over
  // that capacity: at 16,384 members (one per GPU) the agreement's 15 per member take 2.5 s.
  double store_ops_per_s = 100000;
  double notice_store_ops_per_member = 8;
  double agree_store_ops_per_member = 15;
  // A re-formation forms the new layout's groups once, over links they share (comm/pair_mesh.h:
  // a member connects its O(log N) ring and tree links, and its TP peers, concurrently): at
  // least formation_seconds (control_plane_bench form_s at 16 members, the smallest it runs:
  // 0.055 s), or the formation's store operations (address writes, polls, erases) over
  // store_ops_per_s when longer. The bench counts 5.7-6.6 per member at 16-32 members and
  // 17-30 at 64-192, where the members' starvation on its 2 cores stretches the formation and
  // its polls (one per 100 ms at most) with it; 10 sits between (docs/sim.md: the range).
  double formation_seconds = 0.055;
  double formation_store_ops_per_member = 10;
  double reshard_gbytes_per_s = 0.0;  // per GPU, intra-domain; 0: system.scale_up_gbytes_per_s / 2
  int state_bytes_per_param = 14;     // bf16 weight + fp32 master + two fp32 Adam moments
  // What prices NTP-LIVE's detect, agree and rebuild phases (sim/recovery_cost.h): "curve", the
  // control_plane_sim curve at the cluster's GPU count (sim/control_plane_curve.h), or
  // "ops-model", the store operations per member above. Unset in the file: "curve" when the
  // curve loads, else "ops-model" with control_plane_note saying why. After parsing it is one of
  // the two, and `curve` is set exactly when it is "curve".
  std::string control_plane;
  // The curve file; a relative path is taken from the config file's folder (as failures.trace).
  std::string control_plane_curve = "control_plane_curve.json";
  std::shared_ptr<const ControlPlaneCurve> curve;
  std::string control_plane_note;  // why an unset control_plane fell back to "ops-model"
};

struct RunConfig {
  double days = 15.0;
  int trials = 8;
  std::uint64_t seed = 1;
  double sample_hours = 1.0;  // time-series resolution
  bool fixed_batch = false;   // pause when the effective batch falls below the target
  double target_batch_fraction = 1.0;
  int spares = 0;  // spare domains available to fill the batch in fixed-batch mode
  std::vector<PolicySpec> policies;
};

struct SimConfig {
  ModelConfig model;
  ParallelConfig parallel;
  SystemConfig system;
  PowerConfig power;
  FailureConfig failures;
  FailSlowConfig fail_slow;
  RecoveryConfig recovery;
  RunConfig run;

  std::int64_t domains() const { return system.gpus / parallel.domain_size; }
  // Pipeline replicas: TP groups / pp (a domain may hold several TP groups).
  std::int64_t replicas() const { return system.gpus / parallel.tp / parallel.pp; }
};

// The default policy list: every policy, spares sized at 16 domains.
std::vector<PolicySpec> default_policies();

// Parses TOML text. `overrides` are "section.key=value" strings applied before validation (the
// value is parsed as a TOML value: 4, 2.5, true, "text", [1, 2]). `base_dir` resolves a relative
// failures.trace path.
Result<SimConfig> parse_config(const std::string& toml_text,
                               const std::vector<std::string>& overrides = {},
                               const std::string& base_dir = ".");
Result<SimConfig> load_config(const std::string& path,
                              const std::vector<std::string>& overrides = {});

// Cross-field checks (divisibility, memory fit at the minimum degree, ...).
Status validate(const SimConfig& config);

// `v` as std::ostream prints it (6 significant digits, no trailing zeros): how the simulator's
// messages quote a configured or fitted value.
std::string config_number(double v);

}  // namespace ntp::sim
