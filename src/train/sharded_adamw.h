// ShardedAdamW: the optimizer of ZeRO-1. Each DP member keeps fp32 master weights and AdamW
// moments only for the chunks it owns (SyncExecutor::owned_chunks), updates them from the
// reduced gradient, and the executor all-gathers the updated weights to every rank that computes
// with them (SyncExecutor::publish_values). Same update, decay rule (matrices only) and step
// counting as AdamWOptimizer, so the result equals the replicated optimizer's element for element.
#pragma once

#include <vector>

#include "kernels/cpu/adamw.h"
#include "model/param.h"
#include "train/sync_executor.h"

namespace ntp::train {

class ShardedAdamW {
 public:
  // `master`: the current weights of every owned chunk (SyncExecutor::owned_values()).
  ShardedAdamW(std::vector<std::vector<float>> master, kernels::cpu::AdamWHyper hyper);

  // One update of every owned chunk with learning rate `lr`, gradients scaled by `grad_scale`.
  void step(const std::vector<OwnedChunk>& chunks, const std::vector<model::Param>& params,
            float lr, float grad_scale);
  const std::vector<std::vector<float>>& master() const { return master_; }
  int64_t steps_taken() const { return steps_; }
  // Per owned chunk (SyncExecutor::owned_chunks order), for checkpoints.
  std::vector<float>& master(size_t chunk) { return master_[chunk]; }
  std::vector<float>& exp_avg(size_t chunk) { return m_[chunk]; }
  std::vector<float>& exp_avg_sq(size_t chunk) { return v_[chunk]; }
  void set_steps_taken(int64_t steps) { steps_ = steps; }

 private:
  kernels::cpu::AdamWHyper hyper_;
  std::vector<std::vector<float>> master_, m_, v_;
  int64_t steps_ = 0;
};

}  // namespace ntp::train
