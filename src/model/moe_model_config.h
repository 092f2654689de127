// MoeModelConfig: the hyperparameters of the MoE decoder (model/moe_model.h): a Llama decoder
// (model/llama_config.h) whose every layer's FFN is a Mixtral sparse MoE block (model/moe_block.h).
//
// Unit spaces: Llama's query heads, KV groups (derived), vocabulary and LM-head rows, plus
//   experts   n_experts units; a unit is one routed expert's w1, w2 and w3 in every layer (its
//             slab of each layer's stacked expert tensors, model/moe_model.h).
//   ffn       the shared experts (DeepSeek style, every token, weight 1), fused as one dense
//             SwiGLU of n_shared * ffn columns split in units of llama.ffn_unit columns as Llama's
//             FFN; empty when n_shared = 0.
// llama.n_ffn is one expert's intermediate size (Mixtral's intermediate_size).
#pragma once

#include <cstdint>

#include "core/status.h"
#include "model/llama_config.h"
#include "model/moe_block.h"

namespace ntp::model {

struct MoeModelConfig {
  LlamaConfig llama;                   // everything but the FFN; llama.ffn() = one expert's width
  int64_t n_experts = 8;               // routed experts E (num_local_experts)
  int64_t top_k = 2;                   // experts per token (num_experts_per_tok)
  int64_t n_shared = 0;                // shared experts (not supported by MoeModel yet: 0)
  double router_aux_loss_coef = 0.02;  // Mixtral's default

  // The routed block of every layer (normalized top-k, as Mixtral; its n_shared is 0: the model
  // runs the shared experts itself, tensor-parallel over the ffn space).
  MoeConfig block() const;
  // The config of the Llama decoder under the experts: llama with n_ffn = the shared experts'
  // fused width n_shared * ffn (when n_shared = 0, llama's own: the FFN space is then empty).
  LlamaConfig decoder() const;
  // kInvalidArgument naming the bad field (the Llama fields' own checks, then n_experts >= 1,
  // 1 <= top_k <= n_experts, n_shared_experts >= 0, router_aux_loss_coef >= 0 and finite) and
  // the fix.
  Status validate() const;
  // Logical parameters: Llama's without the dense FFN, plus per layer the router (E x C), E
  // experts (3 C F each) and the shared experts (3 C F n_shared).
  int64_t num_params() const;
};

}  // namespace ntp::model
