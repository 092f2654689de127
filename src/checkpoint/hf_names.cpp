#include "checkpoint/hf_names.h"

namespace ntp::checkpoint {

std::optional<std::string> mixtral_expert_name(std::string_view stacked, int64_t expert) {
  constexpr std::string_view kBlock = ".block_sparse_moe.experts.";
  const size_t at = stacked.rfind(kBlock);
  if (at == std::string_view::npos) return std::nullopt;
  const std::string_view rest = stacked.substr(at + kBlock.size());  // "w1.weight"
  if (rest != "w1.weight" && rest != "w2.weight" && rest != "w3.weight") return std::nullopt;
  return std::string(stacked.substr(0, at + kBlock.size())) + std::to_string(expert) + "." +
         std::string(rest);
}

}  // namespace ntp::checkpoint
