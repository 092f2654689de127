// GptModel: a GPT-2 decoder (pre-LayerNorm blocks, learned positions, tied input/output
// embedding) whose tensor parallelism is given by a TpShard, not a scalar degree. Implements
// model::Model (model/model.h).
//
// One instance is one TP rank of one replica. Megatron pattern, every rank holding the units its
// shard lists (non-contiguous allowed):
//   embedding      vocabulary-parallel lookup, all-reduce, + wpe (replicated)
//   attention      column-parallel c_attn (the shard's heads' Q, K, V columns), causal attention on
//                  local heads, row-parallel attn.c_proj (the heads' rows), all-reduce, + bias
//   MLP            column-parallel c_fc (the shard's FFN units), GELU, row-parallel mlp.c_proj,
//                  all-reduce, + bias
//   LM head        tied wte rows -> logits of the local vocabulary; parallel cross-entropy
//                  (all-gather of row maxima, all-reduce of exp-sums and target logits)
// Backward mirrors it: the input gradients of column-parallel layers and of the LM head are
// all-reduced. Replicated parameters (LayerNorms, row-parallel biases, wpe) receive identical
// gradients on every rank; count them once per replica.
//
// Tokens and targets are int32 [B, T] row-major, T <= n_ctx. Loss is the mean over B*T tokens
// in nats; backward accumulates d(loss)/d(param) into Param::grad.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "model/gpt_config.h"
#include "model/param.h"
#include "model/tp_group.h"
#include "model/tp_model.h"
#include "model/tp_shard.h"

namespace ntp::model {

class GptModel final : public TpModel {
 public:
  // `group` (degree 1 when null) must outlive the model; shard must be valid for config. With
  // `initialize` false the weights are left zero (for a caller that fills them at once, e.g. a
  // live re-formation's reshard: drawing the initial weights costs more than the model's size).
  static Result<GptModel> create(const GptConfig& config, TpShard shard, uint64_t seed,
                                 TpGroup* group = nullptr, bool initialize = true);

  GptModel(GptModel&&) = default;
  GptModel& operator=(GptModel&&) = default;

  const GptConfig& config() const { return config_; }
  const TpShard& shard() const { return shard_; }
  // params() in Hugging Face order: wte, wpe, h.0.ln_1 ... h.L-1.mlp.c_proj.bias, ln_f.
  // grads_ready_order(): ln_f, then each block from the last to the first (its 12 tensors), then
  // wte and wpe.
  // Global gradient L2 norm of the replica: sharded gradients summed over ranks, replicated ones
  // counted once.
  Result<double> grad_norm() override;

  // Model FLOPs of one forward+backward over b*t tokens of the whole replica: 6 per parameter
  // per token for the matrix products (tied head counted as a product) plus 12 * n_layer * t *
  // n_embd per token for attention scores and values (the causal half counted in full, as usual).
  static double training_flops(const GptConfig& config, int64_t b, int64_t t);

 private:
  struct LayerParams {
    int ln1_w, ln1_b, attn_w, attn_b, proj_w, proj_b, ln2_w, ln2_b, fc_w, fc_b, fc2_w, fc2_b;
  };
  struct LayerActs {
    // lse: per-row logsumexp of the attention scores [B, H_local, T] (kernels/cpu/attention.h).
    std::vector<float> x_in, h1, mean1, rstd1, qkv, lse, att, x_mid, h2, mean2, rstd2, f, g;
  };

  GptModel(GptConfig config, TpShard shard, TpGroup* group);
  Result<double> run(std::span<const int32_t> tokens, std::span<const int32_t> targets, int64_t b,
                     int64_t t, const BackwardOptions* backward) override;  // null: forward only

  GptConfig config_;
  TpShard shard_;
  int wte_ = -1, wpe_ = -1, lnf_w_ = -1, lnf_b_ = -1;
  std::vector<LayerParams> layers_;
  std::vector<int64_t> vocab_local_;  // logical id -> local wte row or -1
  // Activations of the last forward, reused across steps of the same shape.
  std::vector<LayerActs> acts_;
  std::vector<float> x_final_, hf_, meanf_, rstdf_, logits_;
  // Per-step temporaries, kept to avoid reallocating (and page-faulting) megabytes every step.
  struct Scratch {
    std::vector<float> y, dlogits, dh, dx, dg, df, datt, dqkv;
  };
  Scratch scratch_;
};

}  // namespace ntp::model
