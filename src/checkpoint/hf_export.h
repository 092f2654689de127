// Consolidation for Hugging Face / PyTorch: the logical "value" tensors of a checkpoint as one
// model.safetensors under Hugging Face names, plus a config.json for GPT2LMHeadModel (or, for a
// Llama checkpoint, LlamaForCausalLM; for a MoE, MixtralForCausalLM, or Qwen2MoeForCausalLM with
// shared experts), so that from_pretrained(OUT) loads it. See
// docs/checkpoint.md for the deviations from OpenAI's GPT-2 (byte-level vocabulary of 256 +
// padding, no BPE tokenizer files).
#pragma once

#include <cstdint>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "core/status.h"

namespace ntp::checkpoint {

// The GPT2LMHeadModel config.json for a manifest's model_config {n_layer, n_head, n_embd, n_ffn
// (0 = 4 * n_embd), n_ctx, vocab_size, ffn_unit}. kInvalidArgument naming a missing or
// non-positive field.
Result<nlohmann::json> hf_gpt2_config(const nlohmann::json& model_config);

// The LlamaForCausalLM config.json for a manifest's model_config of family "llama" (the GPT-2
// fields plus n_kv_head (0 = n_head), head_dim (0 = n_embd / n_head), rms_norm_eps, rope_theta).
// ntp's parameter names and layouts are transformers' (RoPE in its rotate_half layout): no
// permutation. kInvalidArgument naming a missing or bad field.
Result<nlohmann::json> hf_llama_config(const nlohmann::json& model_config);

// The MixtralForCausalLM config.json for a manifest's model_config of family "moe" (the Llama
// fields plus n_experts, top_k, n_shared_experts, router_aux_loss_coef): kInvalidArgument for
// shared experts, which Mixtral does not have. The stacked expert tensors are written one per
// expert under Mixtral's names (hf_names.h).
Result<nlohmann::json> hf_mixtral_config(const nlohmann::json& model_config);

// The Qwen2MoeForCausalLM config.json for a MoE with shared experts (n_shared_experts >= 1;
// kInvalidArgument otherwise): moe_intermediate_size one expert's width,
// shared_expert_intermediate_size n_shared x that, norm_topk_prob true, every layer sparse,
// qkv_bias true (the biases and the shared-expert gate are written as zeros and the shared
// down_proj times 2, which makes the block ntp's exactly: hf_names.h).
Result<nlohmann::json> hf_qwen2_moe_config(const nlohmann::json& model_config);

// hf_llama_config when model_config.family is "llama"; for "moe" hf_mixtral_config, or
// hf_qwen2_moe_config with shared experts; hf_gpt2_config when it has no family (GPT-2
// checkpoints) or "gpt2"; kInvalidArgument for another family.
Result<nlohmann::json> hf_config(const nlohmann::json& model_config);

struct ConsolidateOptions {
  bool force = false;  // allow a non-empty OUT (its model.safetensors and config.json are replaced)
};

struct ConsolidateSummary {
  int64_t step = 0;
  int64_t tensors = 0;
  int64_t bytes = 0;  // of tensor data written
};

// Reads every "value" tensor of the checkpoint at `checkpoint_dir` (step or save directory),
// verifying checksums, and writes OUT/model.safetensors and OUT/config.json. Files are built in a
// staging directory next to OUT and moved in only when complete: on any error nothing existing is
// changed. kInvalidArgument when OUT is a non-empty directory (without `force`) or a file, or for
// a bad checkpoint (message names the file and tensor).
Result<ConsolidateSummary> consolidate_to_hf(const std::filesystem::path& checkpoint_dir,
                                             const std::filesystem::path& out_dir,
                                             const ConsolidateOptions& options = {});

}  // namespace ntp::checkpoint
