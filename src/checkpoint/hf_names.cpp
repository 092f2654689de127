#include "checkpoint/hf_names.h"

#include <array>
#include <utility>

namespace ntp::checkpoint {

namespace {

constexpr std::string_view kMoe = ".block_sparse_moe.";

// ntp's name after ".block_sparse_moe." -> Qwen2-MoE's after ".mlp.", for the unstacked tensors.
constexpr std::array<std::pair<std::string_view, std::string_view>, 4> kQwenRenames = {{
    {"gate.weight", "gate.weight"},
    {"shared_experts.gate_proj.weight", "shared_expert.gate_proj.weight"},
    {"shared_experts.up_proj.weight", "shared_expert.up_proj.weight"},
    {"shared_experts.down_proj.weight", "shared_expert.down_proj.weight"},
}};

// The stacked expert matrices: ntp's (Mixtral's) name -> Qwen2-MoE's.
constexpr std::array<std::pair<std::string_view, std::string_view>, 3> kQwenExperts = {{
    {"w1.weight", "gate_proj.weight"},
    {"w3.weight", "up_proj.weight"},
    {"w2.weight", "down_proj.weight"},
}};

// Qwen2-MoE's name of a layer tensor under ".block_sparse_moe." (`prefix` ends with
// "model.layers.{i}."; `rest` follows ".block_sparse_moe."), per expert e for a stacked one.
std::vector<HfPart> qwen_moe_parts(std::string_view prefix, std::string_view rest,
                                   const std::vector<int64_t>& shape) {
  const std::string mlp = std::string(prefix) + "mlp.";
  constexpr std::string_view kExperts = "experts.";
  if (rest.starts_with(kExperts) && shape.size() == 3) {
    for (const auto& [ntp_name, qwen_name] : kQwenExperts) {
      if (rest.substr(kExperts.size()) != ntp_name) continue;
      std::vector<HfPart> parts;
      for (int64_t e = 0; e < shape[0]; ++e) {
        parts.push_back({mlp + "experts." + std::to_string(e) + "." + std::string(qwen_name),
                         {shape[1], shape[2]}});
      }
      return parts;
    }
  }
  for (const auto& [ntp_name, qwen_name] : kQwenRenames) {
    if (rest != ntp_name) continue;
    // sigmoid(0) = 1/2 on the shared expert's output: its down_proj carries the factor 2.
    const float scale = rest == "shared_experts.down_proj.weight" ? 2.0f : 1.0f;
    return {{mlp + std::string(qwen_name), shape, scale}};
  }
  return {};
}

}  // namespace

int64_t HfPart::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

std::optional<std::string> mixtral_expert_name(std::string_view stacked, int64_t expert) {
  constexpr std::string_view kBlock = ".block_sparse_moe.experts.";
  const size_t at = stacked.rfind(kBlock);
  if (at == std::string_view::npos) return std::nullopt;
  const std::string_view rest = stacked.substr(at + kBlock.size());  // "w1.weight"
  if (rest != "w1.weight" && rest != "w2.weight" && rest != "w3.weight") return std::nullopt;
  return std::string(stacked.substr(0, at + kBlock.size())) + std::to_string(expert) + "." +
         std::string(rest);
}

std::vector<HfPart> hf_parts(HfArch arch, std::string_view logical,
                             const std::vector<int64_t>& shape) {
  const std::vector<HfPart> same{{std::string(logical), shape}};
  if (arch == HfArch::kMixtral && shape.size() == 3 && mixtral_expert_name(logical, 0)) {
    std::vector<HfPart> parts;
    for (int64_t e = 0; e < shape[0]; ++e) {
      parts.push_back({*mixtral_expert_name(logical, e), {shape[1], shape[2]}});
    }
    return parts;
  }
  if (arch == HfArch::kQwen2Moe) {
    const size_t at = logical.rfind(kMoe);
    if (at == std::string_view::npos) return same;
    std::vector<HfPart> parts =
        qwen_moe_parts(logical.substr(0, at + 1), logical.substr(at + kMoe.size()), shape);
    return parts.empty() ? same : parts;
  }
  return same;
}

std::vector<HfPart> hf_zero_tensors(HfArch arch, const nlohmann::json& model_config) {
  if (arch != HfArch::kQwen2Moe) return {};
  const int64_t layers = model_config.value("n_layer", int64_t{0});
  const int64_t heads = model_config.value("n_head", int64_t{0});
  const int64_t embd = model_config.value("n_embd", int64_t{0});
  int64_t kv = model_config.value("n_kv_head", int64_t{0});
  int64_t head_dim = model_config.value("head_dim", int64_t{0});
  if (kv == 0) kv = heads;
  if (head_dim == 0 && heads > 0) head_dim = embd / heads;
  std::vector<HfPart> zeros;
  for (int64_t i = 0; i < layers; ++i) {
    const std::string p = "model.layers." + std::to_string(i) + ".";
    zeros.push_back({p + "self_attn.q_proj.bias", {heads * head_dim}});
    zeros.push_back({p + "self_attn.k_proj.bias", {kv * head_dim}});
    zeros.push_back({p + "self_attn.v_proj.bias", {kv * head_dim}});
    zeros.push_back({p + "mlp.shared_expert_gate.weight", {1, embd}});
  }
  return zeros;
}

}  // namespace ntp::checkpoint
