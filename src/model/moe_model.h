// MoeModel: a Mixture-of-Experts decoder (Hugging Face MixtralForCausalLM semantics): LlamaModel's
// embedding, RMSNorms, RoPE grouped-query attention, untied LM head and parallel cross-entropy
// (inherited, tensor-parallel exactly as Llama's over the shard's query heads, vocabulary and
// LM-head rows), with every layer's FFN a sparse MoE block (model/moe_block.h: softmax router,
// top-k renormalized, SwiGLU experts, no capacity limit).
//
// Expert parallelism inside the TP group: the experts are a unit space of their own
// (UnitSpaceId::kExperts); each rank of the replica holds the experts its list names (any subset,
// uneven, non-contiguous; every expert on exactly one rank), the same ones in every layer. Every
// rank sees every token and routes it identically (the router is replicated); a rank's block
// output is the partial sum over its experts, summed over the replica by the same all-reduce a
// row-parallel FFN output uses. In backward the partial input gradient and the call's partial
// router gradient go through one all-reduce ([dh | d gate.weight]) before the router's part is
// added to Param::grad, so every rank ends with the identical full router gradient. That is
// ExpertDispatch::kAllReduce, the default; with kAllToAll (set_expert_dispatch) each rank routes
// only its slice of the tokens and the (token, expert) pairs travel to the experts' holders by
// all-to-all-v (model/moe_exchange.h); the results agree up to the order of float sums.
//
// Parameters, per layer after post_attention_layernorm (Llama's tensors otherwise, model/
// llama_model.h):
//   model.layers.{i}.block_sparse_moe.gate.weight        [E, C]     replicated
//   model.layers.{i}.block_sparse_moe.experts.w1.weight  [E, F, C]  sharded: the rank's experts
//   model.layers.{i}.block_sparse_moe.experts.w2.weight  [E, C, F]  sharded
//   model.layers.{i}.block_sparse_moe.experts.w3.weight  [E, F, C]  sharded
// and with n_shared > 0 the shared experts (DeepSeek style: every token, weight 1), fused as one
// SwiGLU of S = n_shared * F columns, column-/row-parallel over the rank's FFN units exactly as
// Llama's MLP (their partial output goes into the same all-reduce as the experts'):
//   model.layers.{i}.block_sparse_moe.shared_experts.gate_proj.weight  [S, C]  FFN units
//   model.layers.{i}.block_sparse_moe.shared_experts.up_proj.weight    [S, C]  FFN units
//   model.layers.{i}.block_sparse_moe.shared_experts.down_proj.weight  [C, S]  FFN units
// The expert tensors are stacked along a leading expert axis so that each is one tensor of the
// kExperts space (axis 0, one unit = one [F, C] or [C, F] slab), which is how the DP sync, ZeRO-1,
// checkpoints and reshards see every sharded tensor. Slab e of experts.w1.weight is Hugging
// Face's model.layers.{i}.block_sparse_moe.experts.{e}.w1.weight (likewise w2, w3): an export
// splits it. Init: Llama's rule by logical index (norms 1, every matrix N(0, 0.02)).
//
// Loss: mean cross-entropy + router_aux_loss_coef * aux, where aux is transformers'
// load_balancing_loss_func over the router logits of all layers concatenated (as
// MixtralForCausalLM computes it, no attention mask): with n = B T tokens, L layers,
// count_{l,e} = tokens of layer l whose top-k holds e and p_{l,t,e} = layer l's router softmax,
//   aux = E * sum_e F_e P_e,  F_e = (sum_l count_{l,e}) / (L n),  P_e = (sum_l sum_t p_{l,t,e}) /
//   (L n)
//       = (1 / L^2) sum_{l,l'} a_{l,l'},  a_{l,l'} = E sum_e (count_{l,e} / n) (mean_t p_{l',t,e}).
// The diagonal a_{l,l} is layer l's own aux (MoeBlock::forward's value), so aux is not the mean of
// the per-layer losses, (1 / L) sum_l a_{l,l}: it also has the cross-layer terms and a 1 / L^2
// weight (at L = 1 the two agree). Matching transformers keeps a Mixtral export's loss the same.
// The F_e are counts (constants); the gradient is d(coef aux)/d p_{l,t,e} = coef * E *
// (sum_l' count_{l',e}) / (L n)^2 for every layer and token, added on the rank holding expert 0
// (the blocks' lead) and summed over the replica like the rest of dh.
//
// Matrix products of the MoE blocks are float32 whatever matmul_dtype() (bf16 applies to the
// inherited attention, embedding and head products only).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "core/status.h"
#include "model/llama_model.h"
#include "model/llama_shard.h"
#include "model/moe_block.h"
#include "model/moe_exchange.h"
#include "model/moe_model_config.h"
#include "model/tp_group.h"

namespace ntp::model {

class MoeModel final : public LlamaModel {
 public:
  // shard: the rank's query heads, vocabulary and LM-head rows, and its units of the shared
  // experts' columns (ffn_units, of config.decoder(); empty when n_shared = 0); experts: the routed
  // experts it holds (distinct ids in [0, n_experts), any order = local storage order). `group`
  // (degree 1 when null) must outlive the model. Does not communicate.
  static Result<MoeModel> create(const MoeModelConfig& config, LlamaShard shard,
                                 std::vector<int64_t> experts, uint64_t seed,
                                 TpGroup* group = nullptr, bool initialize = true);

  MoeModel(MoeModel&&) = default;
  MoeModel& operator=(MoeModel&&) = default;

  const MoeModelConfig& moe_config() const { return moe_; }
  const std::vector<int64_t>& experts() const { return experts_; }
  // The aux loss of the last forward (without the coefficient; the same on every rank).
  double aux_loss() const { return aux_; }
  // kAllToAll needs n_shared == 0 (model/moe_exchange.h); the first forward after it gathers
  // which rank holds each expert (a collective of the group).
  Status set_expert_dispatch(ExpertDispatch dispatch) override;
  ExpertDispatch expert_dispatch() const { return dispatch_; }
  // Layer l's block (its routing of the last forward: of all tokens under kAllReduce, of this
  // rank's slice under kAllToAll).
  const MoeBlock& block(size_t l) const { return blocks_[l]; }
  // Model::routed_load_peak from the blocks' expert counts (the same on every rank).
  double routed_load_peak() const override;
  std::vector<double> routed_tokens_per_expert() const override;

  // Model FLOPs of one forward+backward over b*t tokens of the whole replica: 6 per active matrix
  // parameter per token (attention, the router, top_k and the shared experts, the LM head) plus
  // Llama's attention term.
  static double training_flops(const MoeModelConfig& config, int64_t b, int64_t t);

 private:
  MoeModel(MoeModelConfig config, LlamaShard shard, std::vector<int64_t> experts, TpGroup* group);
  std::vector<int> add_ffn_params(int64_t layer, const std::string& prefix) override;
  Status ffn_forward(size_t l, const Dims& m, std::vector<float>& x_out) override;
  Result<const float*> ffn_backward(size_t l, const Dims& m) override;
  double ffn_loss(const Dims& m) override;
  // kAllToAll: the exchanges, built at the first forward from the holders of every expert (an
  // all-gather of each rank's list); kInternal unless every expert is held exactly once.
  Status ensure_exchanges();

  MoeModelConfig moe_;
  std::vector<int64_t> experts_;
  std::vector<MoeBlock> blocks_;  // per layer, on the expert tensors of params_
  ExpertDispatch dispatch_ = ExpertDispatch::kAllReduce;
  std::vector<MoeExchange> exchanges_;  // per layer (kAllToAll; empty until the first forward)
  std::vector<RoutingStats> stats_;     // per layer, of the last forward (all n tokens)
  double aux_ = 0.0;
  std::vector<double> aux_dprobs_;  // [E] d(coef aux)/d p_{l,t,e} of the last forward
  std::vector<float> y_, reduce_;   // [n, C] partial output; [n C | E C] backward reduction
};

}  // namespace ntp::model
