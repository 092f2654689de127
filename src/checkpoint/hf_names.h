// Where ntp's logical tensors and Hugging Face's files name things differently. Everything else
// carries transformers' names and layouts already (hf_export.h, hf_import.h).
//
// A MoE model stacks its routed experts along a leading axis (model/moe_model.h):
//   model.layers.{i}.block_sparse_moe.experts.w1.weight  [E, F, C]  (likewise w2 [E, C, F], w3)
// and MixtralForCausalLM stores one tensor per expert:
//   model.layers.{i}.block_sparse_moe.experts.{e}.w1.weight  [F, C]
// Slab e of the stacked tensor is expert e's tensor, bytes for bytes.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace ntp::checkpoint {

// For a stacked expert tensor's name, expert e's Mixtral name; nullopt for any other name.
std::optional<std::string> mixtral_expert_name(std::string_view stacked, int64_t expert);

}  // namespace ntp::checkpoint
