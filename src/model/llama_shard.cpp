#include "model/llama_shard.h"

#include <algorithm>
#include <string>
#include <utility>

#include "core/rng.h"
#include "model/unit_lists.h"

namespace ntp::model {
namespace {

std::vector<LlamaShard> assemble(const std::vector<std::vector<int64_t>>& heads,
                                 const std::vector<std::vector<int64_t>>& ffn,
                                 const std::vector<std::vector<int64_t>>& vocab,
                                 const std::vector<std::vector<int64_t>>& head_rows) {
  std::vector<LlamaShard> layout(heads.size());
  for (size_t r = 0; r < layout.size(); ++r) {
    layout[r] = LlamaShard{heads[r], ffn[r], vocab[r], head_rows[r]};
  }
  return layout;
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

LlamaShard full_shard(const LlamaConfig& config) {
  return LlamaShard{all_units(config.n_head), all_units(config.ffn_units()),
                    all_units(config.vocab_size), all_units(config.vocab_size)};
}

std::vector<LlamaShard> contiguous_layout(const LlamaConfig& config, int degree) {
  NTP_CHECK(degree >= 1);
  return assemble(deal_units(all_units(config.n_head), degree),
                  deal_units(all_units(config.ffn_units()), degree),
                  deal_units(all_units(config.vocab_size), degree),
                  deal_units(all_units(config.vocab_size), degree));
}

std::vector<LlamaShard> shuffled_layout(const LlamaConfig& config, int degree, uint64_t seed) {
  NTP_CHECK(degree >= 1);
  Rng rng(seed);
  auto heads = deal_units(shuffled_units(config.n_head, rng), degree);
  auto ffn = deal_units(shuffled_units(config.ffn_units(), rng), degree);
  auto vocab = deal_units(shuffled_units(config.vocab_size, rng), degree);
  auto head_rows = deal_units(shuffled_units(config.vocab_size, rng), degree);
  return assemble(heads, ffn, vocab, head_rows);
}

Status validate_shard(const LlamaConfig& config, const LlamaShard& shard) {
  NTP_RETURN_IF_ERROR(check_unit_space("query head", config.n_head, {&shard.heads}, false));
  NTP_RETURN_IF_ERROR(check_unit_space("ffn", config.ffn_units(), {&shard.ffn_units}, false));
  NTP_RETURN_IF_ERROR(
      check_unit_space("vocabulary", config.vocab_size, {&shard.vocab_rows}, false));
  return check_unit_space("lm_head row", config.vocab_size, {&shard.head_rows}, false);
}

Status validate_layout(const LlamaConfig& config, const std::vector<LlamaShard>& layout) {
  if (layout.empty()) return invalid_argument("a TP layout needs at least one rank");
  std::vector<const std::vector<int64_t>*> heads, ffn, vocab, head_rows;
  for (const LlamaShard& s : layout) {
    heads.push_back(&s.heads);
    ffn.push_back(&s.ffn_units);
    vocab.push_back(&s.vocab_rows);
    head_rows.push_back(&s.head_rows);
  }
  NTP_RETURN_IF_ERROR(check_unit_space("query head", config.n_head, heads, true));
  NTP_RETURN_IF_ERROR(check_unit_space("ffn", config.ffn_units(), ffn, true));
  NTP_RETURN_IF_ERROR(check_unit_space("vocabulary", config.vocab_size, vocab, true));
  return check_unit_space("lm_head row", config.vocab_size, head_rows, true);
}

}  // namespace ntp::model
