// TrainConfig: everything `ntp train` is told, with validation that names the flag to fix.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"
#include "kernels/cpu/matmul.h"
#include "model/expert_dispatch.h"
#include "model/model_config.h"
#include "shard/cluster_spec.h"
#include "train/batch_split.h"
#include "train/sync_executor.h"

namespace ntp::train {

enum class ControlPlane { kFlat, kHierarchy };

struct TrainConfig {
  // Cluster: `domains` replicas of `tp` device slots; failed slots take no part.
  int domains = 1;
  int tp = 1;
  int min_tp = 1;
  std::vector<shard::SlotRef> failed;
  std::string strategy = "fold";  // "fold" or "native" (shard/)

  // Model.
  model::ModelConfig model;
  int64_t vocab_multiple = 1;  // vocabulary padded to a multiple of this
  uint64_t seed = 1234;
  // Input precision of the model's matrix products (kernels/cpu/matmul.h); master weights,
  // gradients, their reductions and the optimizer state are float32 under either.
  kernels::cpu::MatmulDtype dtype = kernels::cpu::MatmulDtype::kFp32;
  // How a MoE layer's tokens meet the experts of the other TP ranks (model/expert_dispatch.h);
  // alltoall needs --model moe without shared experts.
  model::ExpertDispatch expert_dispatch = model::ExpertDispatch::kAllReduce;

  // Data: llm.c .bin token files (data/token_file.h).
  std::string train_data = "data/fortunes_train.bin";
  std::string val_data = "data/fortunes_val.bin";
  uint64_t data_seed = 1;

  // Batch: global batch in sequences, split into micro-batches over replicas (train/batch_split.h).
  int64_t batch = 0;  // 0: replicas * grad_accum * micro_batch
  int64_t micro_batch = 4;
  int64_t grad_accum = 1;  // used only when batch == 0
  BatchPolicy batch_policy = BatchPolicy::kBoost;
  // The largest power factor x TDP the devices' power control can set (batch policy boost). The
  // CPU's can set none: 1. Above 1 on CPU it emulates such a control for tests: the settings are
  // recorded and the batch split assumes their speed-up, which nothing on CPU delivers.
  double power_limit = 1.0;

  // Optimizer: AdamW, linear warm-up then cosine decay to min_lr, global-norm clipping.
  float lr = 3e-3f;
  float min_lr = 3e-4f;
  int64_t warmup = 20;
  float beta1 = 0.9f;
  float beta2 = 0.95f;
  float eps = 1e-8f;
  float weight_decay = 0.1f;
  double grad_clip = 1.0;  // 0: no clipping
  OptimizerSharding optimizer = OptimizerSharding::kReplicated;

  int64_t steps = 100;
  int64_t eval_every = 0;  // 0: only at the end
  int64_t eval_samples = 64;

  // Output.
  std::string out_dir = "out/train";
  std::string metrics_file;  // empty: OUT_DIR/metrics.jsonl
  std::string dump_dir;      // testing: logical gradients of step 0 and final weights per rank
  bool quiet = false;        // no per-step progress lines

  // Checkpoints (docs/checkpoint.md).
  std::string save_dir;    // empty: no checkpoints
  int64_t save_every = 0;  // save after every N steps (0: only at the end, when save_dir is set)
  int keep_last = 3;       // complete checkpoints kept (0: all)
  std::string resume;      // a step or save directory; "auto": save_dir's latest if any
  // Start the run (step 0, fresh optimizer) from these weights: a Hugging Face directory or an
  // ntp checkpoint (train/weight_source.h); a checkpoint to --resume from takes precedence.
  std::string init_from;
  int64_t stop_after = 0;  // stop after this many steps of this run (0: run to --steps)

  bool live_recovery = true;  // false: a failure ends the job (for --restart-on-failure baselines)
  // The recovery protocol: the flat one (every worker a member of one agreement on the job's
  // store), or the domain hierarchy (docs/design/control-plane-hierarchy.md: each domain agrees on
  // its own store, its leader in the global round), experimental: kills and hangs only (no
  // joiners, drops, parking or rebalancing yet), under `ntp launch --domain-size <tp>`.
  ControlPlane control_plane = ControlPlane::kFlat;
  // Re-form with speed-weighted layouts when measured speeds show a slow rank (train/rebalancer.h).
  // On by default: a slowed device is the common case the job must absorb, not an option.
  bool rebalance = true;
  // With rebalance: a rank measured slowed whose speed stays below this fraction of the job's
  // median (train/speed_estimator.h) is treated as failed (it sits out, holding nothing, until its
  // own probe finds it recovered, then rejoins as a repair); 0: never. Ignored without rebalance
  // (the speeds are measured there).
  double drop_below = 0.3;
  bool drops_slow_ranks() const { return rebalance && drop_below > 0.0; }
  // With rebalance: the seconds a re-formation costs the job, which a move must save before it is
  // proposed (train/speed_estimator.h, ski rental); < 0: measured (the leader's last re-formation,
  // the first job's build until then).
  double rebalance_cost_s = -1.0;

  // Benchmarks on a host with fewer cores than workers: > 0 makes every micro-batch also take
  // the time a device of this many GFLOP/s would (train/replica_pace.h's work model: 6 FLOPs per
  // held parameter per token), slept after its real compute and scaled by the worker's throttle.
  // Sleeping takes no core, so each worker behaves as if it had a device of its own.
  double emulate_device_gflops = 0.0;

  // Runtime.
  int64_t bucket_bytes = 128 << 10;
  int comm_timeout_ms = 30000;
  // A worker whose heartbeat (every hang_detect_ms / 4) has been still this long is taken as hung:
  // its ring neighbours' failure watch aborts the job's collectives and the job re-forms without
  // it.
  int hang_detect_ms = 1000;

  int world_slots() const { return domains * tp; }
  int64_t global_batch() const;
  // The grain of scale's and boost's batch split (train/batch_split.h): whole micro-batches for
  // a MoE, whose load-balancing loss is a statistic of each forward's tokens; samples otherwise.
  BatchGrain batch_grain() const;
};

// Checks and completes the config (pads the vocabulary, sorts failed slots, derives the batch,
// validates the cluster against min_tp and the model's unit counts). Errors name the flag.
Status validate_train_config(TrainConfig& config);

// Parses "fold"/"native" and "replicated"/"sharded" (errors name the flag).
Result<OptimizerSharding> parse_optimizer_sharding(const std::string& text);
// Parses --dtype: "fp32" or "bf16" (the error names the value and the choices).
Result<kernels::cpu::MatmulDtype> parse_matmul_dtype(const std::string& text);
const char* optimizer_sharding_name(OptimizerSharding sharding);
// Parses --control-plane: "flat" or "hierarchy".
Result<ControlPlane> parse_control_plane(const std::string& text);

// The cluster spec (failed slots, unit spaces of the model) the layout is planned from.
shard::ClusterSpec cluster_spec(const TrainConfig& config);

}  // namespace ntp::train
