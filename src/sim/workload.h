// Step-time and memory model of one training job (the workload and system layers).
//
// A TP group of `tp` GPUs is one replica stage; `pp` consecutive groups form a pipeline replica and
// the cluster runs replicas() replicas in data parallel. Per step and per GPU of a stage at TP
// degree t (seconds):
//   compute(t) = tokens_per_replica x stage_layers x 3 x
//                (F_head x ceil(heads / t) / heads + F_ffn x ceil(U / t) / U) / (peak x efficiency)
//     F_head = 8 h^2 + 2 s h  (QKV/output projections and causal attention: split by whole heads)
//     F_ffn  = 4 h f          (fc1 + fc2, f = ffn_multiplier x h, split by U = f /
//     ffn_unit_columns) ceil(units / t) is shard::max_units_per_rank: the slowest rank sets the
//     pace.
//   tp_comm(t) = (1 - tp_overlap) x tokens x stage_layers x 4 all-reduces x 2h bytes x 2(t-1)/t
//                / scale_up bandwidth
//   work(t) = compute(t) + tp_comm(t); the pipeline adds a bubble of (pp - 1) / microbatches.
//   dp(t_min) = ring all-reduce of the stage's bf16 gradients over replicas() core ranks, each
//               holding 1/t_min of them (NTP's 1/t_min effect: every replica reduces at the
//               smallest degree in the cluster), plus the fold/unfold all-to-alls on the scale-up
//               link; it hides behind dp_overlap x the backward pass (2/3 of compute(tp)).
//   step(t_min) = work(tp) x (1 + bubble) + max(0, dp(t_min) - hidden window).
// A degraded stage at degree t runs at speed(t) = work(tp) / work(t) of a healthy one: under the
// `scale` policy its replica processes that fraction of a healthy replica's samples per step.
#pragma once

#include <cstdint>
#include <vector>

#include "sim/config.h"

namespace ntp::sim {

struct StepBreakdown {
  double compute_s = 0, tp_comm_s = 0, bubble_s = 0, dp_s = 0, dp_exposed_s = 0, total_s = 0;
};

class Workload {
 public:
  // `config` must pass the basic divisibility checks of validate() (degrees in 1..tp).
  explicit Workload(const SimConfig& config);

  // TP degree a group runs at with `failed` of its tp GPUs down: the healthy count rounded down
  // to degree_multiple, or 0 when that is below min_degree (the group cannot run).
  int degree_after_failures(int failed) const;
  // Relative speed of a stage at `degree` (1 at tp, 0 for degree 0).
  double speed(int degree) const { return speed_[degree]; }
  // Throughput factor every replica sees when the smallest degree in the cluster is t_min:
  // step(tp) / step(t_min), 1 at tp.
  double dp_factor(int t_min) const { return dp_factor_[t_min]; }
  StepBreakdown step(int degree, int t_min) const;
  // REBALANCE: the speed of a stage at `degree` whose active ranks include the slowed ones in
  // `slow` (their speed factors; the other degree - slow.size() ranks at 1) when each rank's heads
  // and FFN units are chosen together in proportion to its speed, in whole units, each unit
  // costing its FLOPs (weighted_split.h), relative to the same split at full speed (1 with no
  // slowed rank; <= 1). Close to (degree - sum of (1 - factor)) / degree when units are fine; it
  // is the compute's ratio, and callers apply it to the stage's whole work, as they do an
  // unmitigated factor. Requires slow.size() <= degree.
  double rebalanced_speed(int degree, const std::vector<double>& slow) const;
  // Bytes of HBM a GPU needs at `degree` (weights, gradients, optimizer state, activations).
  double memory_bytes(int degree) const;
  double tokens_per_second_healthy() const;

  double stage_params() const { return stage_params_; }
  double microbatches() const { return microbatches_; }

 private:
  double compute_s(int degree) const;
  double tp_comm_s(int degree) const;
  double dp_s(int t_min) const;

  SimConfig c_;
  double stage_layers_ = 0, tokens_per_replica_ = 0, microbatches_ = 0, stage_params_ = 0;
  std::vector<double> speed_, dp_factor_;
};

}  // namespace ntp::sim
