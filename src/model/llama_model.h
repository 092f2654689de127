// LlamaModel: a Llama-family decoder (RMSNorm, RoPE, grouped-query attention, SwiGLU, untied LM
// head, no biases; Hugging Face LlamaForCausalLM semantics and parameter names) whose tensor
// parallelism is given by a LlamaShard, not a scalar degree. Implements model::Model
// (model/model.h).
//
// One instance is one TP rank of one replica. Megatron pattern, every rank holding the units its
// shard lists (non-contiguous allowed):
//   embedding   vocabulary-parallel lookup of embed_tokens rows, all-reduce
//   attention   column-parallel q_proj (the shard's query heads) and k_proj / v_proj (every KV
//               group those heads read, model/llama_shard.h), RoPE on q and k, causal attention
//               of each local query head against its group's K/V, row-parallel o_proj,
//               all-reduce
//   FFN         column-parallel gate_proj / up_proj (the shard's FFN units), SwiGLU,
//               row-parallel down_proj, all-reduce
//   LM head     the shard's lm_head rows -> logits of those vocabulary ids; parallel
//               cross-entropy (as GptModel: all-gather of row maxima, all-reduce of exp-sums and
//               target logits)
// Backward mirrors it: the input gradients of the column-parallel layers and of the LM head are
// all-reduced; replicated parameters (the RMSNorm weights) get identical gradients on every rank.
//
// KV groups held by several ranks (a group whose query heads span ranks): every holder computes
// the group's K/V from the same weights, and each holder's backward produces the part of the
// group's weight gradient that comes from its own query heads. Inside forward_backward, the parts
// of the call's K/V weight gradient that belong to shared groups are summed over the replica (in
// the same TpGroup::all_reduce_sum as the attention block's input gradient, no extra collective)
// before they are added to Param::grad, so after each call every holder's gradient of a shared
// group is the full one, bit-identical across holders. Which groups are shared is learned once,
// on the first forward_backward, by an all-reduce of n_kv_head holder counts. The owner copy is
// the one on the rank holding the group's first query head; the other copies are marked in
// Param::unit_copy and must be counted once: grad_norm() does; the DP sync, ZeRO-1 and
// checkpoints must (docs/model.md, "Llama").
//
// Tokens and targets are int32 [B, T] row-major, T <= n_ctx. Loss is the mean over B*T tokens in
// nats; backward accumulates d(loss)/d(param) into Param::grad.
#pragma once

#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "model/llama_config.h"
#include "model/llama_shard.h"
#include "model/param.h"
#include "model/tp_group.h"
#include "model/tp_model.h"

namespace ntp::model {

class LlamaModel : public TpModel {
 public:
  // `group` (degree 1 when null) must outlive the model; shard must be valid for config. With
  // `initialize` false the weights are left zero (for a caller that fills them at once). Does
  // not communicate.
  static Result<LlamaModel> create(const LlamaConfig& config, LlamaShard shard, uint64_t seed,
                                   TpGroup* group = nullptr, bool initialize = true);

  LlamaModel(LlamaModel&&) = default;
  LlamaModel& operator=(LlamaModel&&) = default;

  const LlamaConfig& config() const { return config_; }
  const LlamaShard& shard() const { return shard_; }
  // The KV groups this rank holds, ascending (the local unit order of k_proj / v_proj).
  const std::vector<int64_t>& kv_groups() const { return kv_groups_; }
  // params() in Hugging Face order: model.embed_tokens.weight, per layer input_layernorm, q_proj,
  // k_proj, v_proj, o_proj, post_attention_layernorm, gate_proj, up_proj, down_proj, then
  // model.norm and lm_head.weight. grads_ready_order(): lm_head and model.norm, then each layer
  // from the last to the first (its 9 tensors), then embed_tokens.
  // Global gradient L2 norm of the replica: sharded gradients summed over ranks with KV copies
  // (Param::unit_copy) skipped, replicated ones counted once. Collective.
  Result<double> grad_norm() override;

  // Model FLOPs of one forward+backward over b*t tokens of the whole replica (no KV copies): 6 per
  // matrix parameter per token plus 12 * n_layer * t * n_head * head_dim per token for attention
  // scores and values (the causal half counted in full, as usual).
  static double training_flops(const LlamaConfig& config, int64_t b, int64_t t);

 protected:
  // A decoder of this architecture whose per-layer FFN is another block (MoeModel): it derives,
  // overrides the ffn_* hooks below, and builds itself with build(). Everything else (embedding,
  // attention, norms, LM head, the cross-entropy, grad_norm) is this class's.
  LlamaModel(LlamaConfig config, LlamaShard shard, TpGroup* group);
  // Validates config and shard, adds every parameter (the FFN's through add_ffn_params, in each
  // layer after post_attention_layernorm), allocates and initializes them (Llama's rule: norm
  // weights 1, every other tensor N(0, 0.02), by logical index), and sets the ready order (per
  // layer its attention tensors then the FFN's).
  static Status build(LlamaModel& m, uint64_t seed, bool initialize);
  // training_flops with ffn_params active FFN matrix parameters per layer and token.
  static double decoder_flops(const LlamaConfig& config, double ffn_params, int64_t b, int64_t t);

  struct LayerParams {
    int ln1, q, k, v, o, ln2;
    std::vector<int> ffn;  // the FFN block's tensors (dense: gate_proj, up_proj, down_proj)
  };
  struct LayerActs {
    // qkv [N, 3 * Hl * D]: post-RoPE Q of the local query heads, then each local head's group's
    // K and V copied per head (the layout attention_forward takes); lse [B, Hl, T].
    std::vector<float> x_in, h1, rstd1, qkv, lse, att, x_mid, h2, rstd2, gu, s;
  };

  // Sizes of one call: batch, tokens n = b t, width, head size, local query heads hl and KV groups
  // gl, their widths qd = hl d and kd = gl d, the fused QKV row 3 qd, local FFN columns, local
  // embedding and lm_head rows.
  struct Dims {
    int64_t b, t, n, c, d, hl, gl, qd, kd, row, fl, vl, vh;
    kernels::cpu::MatmulDtype dtype;  // matmul_dtype() of the call
    float loss_scale = 1.0f;          // BackwardOptions::loss_scale of the call (backward only)
  };

  // The FFN hooks. add_ffn_params appends layer `layer`'s FFN tensors (names start with
  // `prefix`, "model.layers.{layer}.") and returns their indices. ffn_forward reads the layer's
  // normalized input acts_[l].h2 [n, c] and writes x_out = acts_[l].x_mid + the FFN's output
  // (summed over the replica). ffn_backward reads the gradient of the layer's output
  // (scratch_.dx), accumulates the FFN's weight gradients and returns the gradient of h2 [n, c],
  // summed over the replica. ffn_loss is what the FFNs add to the loss of the forward just run
  // (0 for dense ones).
  virtual std::vector<int> add_ffn_params(int64_t layer, const std::string& prefix);
  virtual Status ffn_forward(size_t l, const Dims& m, std::vector<float>& x_out);
  virtual Result<const float*> ffn_backward(size_t l, const Dims& m);
  virtual double ffn_loss(const Dims& m);

  // The dense SwiGLU FFN's parts, for p = its [gate, up, down] parameter indices, over this rank's
  // FFN units (m.fl columns): add_dense_ffn_params adds the three tensors, named prefix +
  // gate_proj.weight, up_proj.weight, down_proj.weight; dense_ffn_hidden fills acts_[l].gu and .s
  // from acts_[l].h2; dense_ffn_output adds the rank's partial output s down^T to y [n, c];
  // dense_ffn_backward, given the output gradient scratch_.dx, accumulates the three weight
  // gradients and writes dh [n, c] = the partial input gradient + beta dh (no reduction).
  std::vector<int> add_dense_ffn_params(const std::string& prefix);
  void dense_ffn_hidden(size_t l, const Dims& m, const int* p);
  void dense_ffn_output(size_t l, const Dims& m, const int* p, float* y);
  void dense_ffn_backward(size_t l, const Dims& m, const int* p, float beta, float* dh);

  std::vector<LayerParams> layers_;
  std::vector<LayerActs> acts_;

 private:
  // Learns which held KV groups are also held by another rank (once; collective).
  Status find_shared_kv_groups();
  Result<double> run(std::span<const int32_t> tokens, std::span<const int32_t> targets, int64_t b,
                     int64_t t, const BackwardOptions* backward) override;  // null: forward only
  Dims dims(int64_t b, int64_t t) const;
  // z[n, c] = residual + the all-reduced xin[n, in] weight[c, in]^T of a row-parallel layer (a
  // single rank adds the product straight onto the residual: sgemm with beta = 1).
  Status row_parallel_residual(const Dims& m, const float* xin, int64_t in, int weight,
                               const std::vector<float>& residual, std::vector<float>& z);
  // Layer l's blocks. Forward: attention x_in -> x_mid, FFN x_mid -> x_out (RMSNorm, then the
  // ffn_* hooks), saving activations. Backward: scratch_.dx holds the gradient of the block's
  // output and becomes that of its input; weight gradients accumulate (shared KV groups reduced
  // over the replica, see the top).
  Status forward_attention(size_t l, const Dims& m);
  Status forward_ffn(size_t l, const Dims& m, std::vector<float>& x_out);
  Status backward_ffn(size_t l, const Dims& m);
  Status backward_attention(size_t l, const Dims& m);

  LlamaConfig config_;
  LlamaShard shard_;
  int embed_ = -1, norm_ = -1, lm_head_ = -1;
  std::vector<int64_t> kv_groups_;          // held KV groups, ascending
  std::vector<int64_t> head_group_;         // local query head j -> local index of its KV group
  bool shared_known_ = false;               // find_shared_kv_groups() has run
  int64_t n_shared_ = 0;                    // KV groups held by >= 2 ranks of the replica
  std::vector<int64_t> shared_slot_;        // local KV group -> slot among the shared ones, or -1
  std::vector<int64_t> vocab_local_;        // logical id -> local embed_tokens row or -1
  std::vector<int64_t> head_local_;         // logical id -> local lm_head row or -1
  std::vector<float> rope_cos_, rope_sin_;  // [n_ctx, D/2] (kernels/cpu/rope.h)
  std::vector<float> x_final_, hf_, rstdf_, logits_;

 protected:
  struct Scratch {
    std::vector<float> y, dlogits, dx, reduce, ds, dgu, datt, dqkv, dkv;
  };
  Scratch scratch_;
};

}  // namespace ntp::model
