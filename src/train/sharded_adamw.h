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
  std::vector<std::vector<float>>& exp_avgs() { return m_; }
  std::vector<std::vector<float>>& exp_avg_sqs() { return v_; }
  // The copy of the previous DP member's moments (SyncExecutor::mirror_moments; live recovery).
  std::vector<std::vector<float>>& mirror_exp_avgs() { return mirror_m_; }
  std::vector<std::vector<float>>& mirror_exp_avg_sqs() { return mirror_v_; }

 private:
  kernels::cpu::AdamWHyper hyper_;
  std::vector<std::vector<float>> master_, m_, v_;
  std::vector<std::vector<float>> mirror_m_, mirror_v_;
  int64_t steps_ = 0;
};

}  // namespace ntp::train
