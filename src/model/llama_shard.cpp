#include "model/llama_shard.h"

#include <algorithm>

namespace ntp::model {
UnitSpaces<LlamaShard> unit_spaces(const LlamaConfig& config) {
  return {{"query head", config.n_head, &LlamaShard::heads},
          {"ffn", config.ffn_units(), &LlamaShard::ffn_units},
          {"vocabulary", config.vocab_size, &LlamaShard::vocab_rows},
          {"lm_head row", config.vocab_size, &LlamaShard::head_rows}};
}

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

}  // namespace ntp::model
