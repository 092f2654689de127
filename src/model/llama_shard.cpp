#include "model/llama_shard.h"

#include <algorithm>

#include "model/unit_lists.h"

namespace ntp::model {
namespace {

// In this order: shuffled_layout draws the spaces' shuffles from one generator in turn.
UnitSpaces<LlamaShard> spaces(const LlamaConfig& config) {
  return {{"query head", config.n_head, &LlamaShard::heads},
          {"ffn", config.ffn_units(), &LlamaShard::ffn_units},
          {"vocabulary", config.vocab_size, &LlamaShard::vocab_rows},
          {"lm_head row", config.vocab_size, &LlamaShard::head_rows}};
}

}  // namespace

std::vector<int64_t> kv_groups(const LlamaConfig& config, const LlamaShard& shard) {
  std::vector<int64_t> groups;
  for (int64_t h : shard.heads) groups.push_back(config.kv_group(h));
  std::sort(groups.begin(), groups.end());
  groups.erase(std::unique(groups.begin(), groups.end()), groups.end());
  return groups;
}

bool owns_kv_group(const LlamaConfig& config, const LlamaShard& shard, int64_t g) {
  const int64_t first = g * config.q_per_kv();
  return std::find(shard.heads.begin(), shard.heads.end(), first) != shard.heads.end();
}

LlamaShard full_shard(const LlamaConfig& config) { return full_shard_of(spaces(config)); }

std::vector<LlamaShard> contiguous_layout(const LlamaConfig& config, int degree) {
  return contiguous_layout_of(spaces(config), degree);
}

std::vector<LlamaShard> shuffled_layout(const LlamaConfig& config, int degree, uint64_t seed) {
  return shuffled_layout_of(spaces(config), degree, seed);
}

Status validate_shard(const LlamaConfig& config, const LlamaShard& shard) {
  return validate_shard_of(spaces(config), shard);
}

Status validate_layout(const LlamaConfig& config, const std::vector<LlamaShard>& layout) {
  return validate_layout_of(spaces(config), layout);
}

}  // namespace ntp::model
