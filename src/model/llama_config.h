// Llama-family hyperparameters and the tensor-parallel unit spaces they define.
//
// Architecture (Hugging Face transformers' LlamaForCausalLM, no biases anywhere): token embedding,
// n_layer blocks (RMSNorm -> causal GQA self-attention with RoPE -> residual, RMSNorm -> SwiGLU
// FFN -> residual), a final RMSNorm and an untied LM head.
//
// Unit spaces (what TP splits, in whole units):
//   query heads   n_head units; a unit is one query head's head_dim rows of q_proj.weight and its
//                 head_dim columns of o_proj.weight. KV group g (k_proj/v_proj rows g*head_dim ..)
//                 serves the n_head / n_kv_head consecutive query heads [g * q_per_kv, (g+1) *
//                 q_per_kv); a rank holds every KV group any of its query heads belongs to, so a
//                 group whose query heads sit on several ranks is held by each of them (see
//                 llama_model.h for how its gradient is reduced and counted once).
//   ffn units     n_ffn / ffn_unit units; a unit is ffn_unit consecutive rows of gate_proj.weight
//                 and up_proj.weight plus the matching columns of down_proj.weight.
//   vocabulary    vocab_size units; one row of embed_tokens.weight.
//   head rows     vocab_size units; one row of the untied lm_head.weight (its own space: the
//                 embedding and the head may be split differently).
#pragma once

#include <cstdint>

#include "core/status.h"

namespace ntp::model {

struct LlamaConfig {
  int64_t n_layer = 2;
  int64_t n_head = 8;     // query heads
  int64_t n_kv_head = 2;  // key/value heads (GQA); n_head for plain multi-head attention
  int64_t n_embd = 64;
  int64_t head_dim = 0;  // 0 means n_embd / n_head; must be even (RoPE pairs)
  int64_t n_ffn = 0;     // intermediate_size; 0 means 4 * n_embd
  int64_t n_ctx = 64;
  int64_t vocab_size = 256;
  int64_t ffn_unit = 1;  // FFN columns per TP unit
  double rms_norm_eps = 1e-5;
  double rope_theta = 10000.0;

  int64_t dim() const { return head_dim == 0 ? n_embd / n_head : head_dim; }
  int64_t ffn() const { return n_ffn == 0 ? 4 * n_embd : n_ffn; }
  int64_t ffn_units() const { return ffn() / ffn_unit; }
  int64_t q_per_kv() const { return n_head / n_kv_head; }
  // The KV group query head h reads.
  int64_t kv_group(int64_t h) const { return h / q_per_kv(); }

  // kInvalidArgument naming the bad field when sizes are not positive, do not divide, or the
  // head size is odd.
  Status validate() const;
  // Number of logical parameters (embedding and LM head counted separately: untied).
  int64_t num_params() const;
};

}  // namespace ntp::model
