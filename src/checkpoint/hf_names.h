// Where ntp's logical tensors and Hugging Face's files name or store things differently. Everything
// else carries transformers' names and layouts already (hf_export.h, hf_import.h).
//
// A MoE model stacks its routed experts along a leading axis (model/moe_model.h):
//   model.layers.{i}.block_sparse_moe.experts.w1.weight  [E, F, C]  (likewise w2 [E, C, F], w3)
// and both MoE architectures store one tensor per expert; slab e of the stacked tensor is expert
// e's tensor, bytes for bytes:
//   MixtralForCausalLM   model.layers.{i}.block_sparse_moe.experts.{e}.w1.weight  [F, C]
//   Qwen2MoeForCausalLM  model.layers.{i}.mlp.experts.{e}.gate_proj.weight       [F, C]
//                        (w1 -> gate_proj, w3 -> up_proj, w2 -> down_proj)
// Qwen2-MoE is the export of a MoE with shared experts (Mixtral has none). Its block differs from
// ntp's in two ways, both made exact by the stored values:
//   - its router is `mlp.gate.weight` and its shared expert `mlp.shared_expert.*` (ntp's fused
//     shared SwiGLU of n_shared x F columns, the same three matrices);
//   - it scales the shared expert's output by sigmoid(shared_expert_gate(x)): the export stores
//     that gate as zeros (sigmoid(0) = 1/2) and down_proj times 2 (exact in binary floating
//     point), so the block computes ntp's shared(x); the import divides by 2 again.
//   Its attention has q/k/v biases, stored as zeros. An import reads a Qwen2-MoE only when those
//   biases and the shared-expert gate are zero (or absent): ntp's model has neither.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace ntp::checkpoint {

// The Hugging Face architectures ntp writes and reads.
enum class HfArch { kGpt2, kLlama, kMixtral, kQwen2Moe };

// One stored tensor holding (a slab of) a logical tensor: stored values = scale x ntp's.
struct HfPart {
  std::string name;
  std::vector<int64_t> shape;
  float scale = 1.0f;

  int64_t numel() const;
};

// The stored tensors of the logical tensor `logical` of `shape` under `arch`, in order:
// concatenated (divided by their scales) they are the logical tensor.
std::vector<HfPart> hf_parts(HfArch arch, std::string_view logical,
                             const std::vector<int64_t>& shape);

// The tensors `arch` has and ntp's model does not, all zero in an export and required to be zero
// (or absent) by an import: Qwen2-MoE's per-layer q/k/v biases and shared_expert_gate.weight
// (model_config: the manifest form, n_layer, n_head, n_kv_head, head_dim, n_embd). Empty for the
// other architectures.
std::vector<HfPart> hf_zero_tensors(HfArch arch, const nlohmann::json& model_config);

// For a stacked expert tensor's name, expert e's Mixtral name; nullopt for any other name.
std::optional<std::string> mixtral_expert_name(std::string_view stacked, int64_t expert);

}  // namespace ntp::checkpoint
