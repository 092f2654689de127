// AdamW over a model's local parameters, with optional global-norm clipping and a
// warmup + cosine learning-rate schedule.
//
// State (m, v) has each Param's local shape, so under TP every rank updates exactly its shard.
// Weight decay applies to matrices (rank-2 tensors: linear weights and embeddings), never to
// biases or LayerNorm parameters (GPT-2 / nanoGPT practice).
#pragma once

#include <cstdint>
#include <vector>

#include "kernels/cpu/adamw.h"
#include "model/param.h"

namespace ntp::train {

class AdamWOptimizer {
 public:
  AdamWOptimizer(const std::vector<model::Param>& params, kernels::cpu::AdamWHyper hyper);

  // One update with learning rate `lr`, gradients multiplied by `grad_scale` (the clip
  // coefficient; 1 = unclipped) inside the update's single pass: Param::grad is left unscaled.
  // Checks params match the ones given at construction.
  void step(std::vector<model::Param>& params, float lr, float grad_scale = 1.0f);
  int64_t steps_taken() const { return steps_; }
  // The moments of params[i] (local shape, flat), e.g. for checkpoints.
  std::vector<float>& exp_avg(size_t i) { return m_[i]; }
  std::vector<float>& exp_avg_sq(size_t i) { return v_[i]; }
  // Resuming: the updates already taken (bias correction continues from there).
  void set_steps_taken(int64_t steps) { steps_ = steps; }

 private:
  kernels::cpu::AdamWHyper hyper_;
  std::vector<std::vector<float>> m_, v_;
  int64_t steps_ = 0;
};

// Linear warmup over `warmup` steps to max_lr, then cosine decay to min_lr at `total` steps
// (constant min_lr afterwards). step is 0-based.
float warmup_cosine_lr(int64_t step, int64_t warmup, int64_t total, float max_lr, float min_lr);

}  // namespace ntp::train
