#include "model/tp_shard.h"

#include <string>
#include <utility>

#include "core/rng.h"
#include "model/unit_lists.h"

namespace ntp::model {
namespace {

std::vector<TpShard> assemble(const std::vector<std::vector<int64_t>>& heads,
                              const std::vector<std::vector<int64_t>>& ffn,
                              const std::vector<std::vector<int64_t>>& vocab) {
  std::vector<TpShard> layout(heads.size());
  for (size_t r = 0; r < layout.size(); ++r) layout[r] = TpShard{heads[r], ffn[r], vocab[r]};
  return layout;
}

}  // namespace

TpShard full_shard(const GptConfig& config) {
  return TpShard{all_units(config.n_head), all_units(config.ffn_units()),
                 all_units(config.vocab_size)};
}

std::vector<TpShard> contiguous_layout(const GptConfig& config, int degree) {
  NTP_CHECK(degree >= 1);
  return assemble(deal_units(all_units(config.n_head), degree),
                  deal_units(all_units(config.ffn_units()), degree),
                  deal_units(all_units(config.vocab_size), degree));
}

std::vector<TpShard> shuffled_layout(const GptConfig& config, int degree, uint64_t seed) {
  NTP_CHECK(degree >= 1);
  Rng rng(seed);
  return assemble(deal_units(shuffled_units(config.n_head, rng), degree),
                  deal_units(shuffled_units(config.ffn_units(), rng), degree),
                  deal_units(shuffled_units(config.vocab_size, rng), degree));
}

Status validate_shard(const GptConfig& config, const TpShard& shard) {
  NTP_RETURN_IF_ERROR(check_unit_space("head", config.n_head, {&shard.heads}, false));
  NTP_RETURN_IF_ERROR(check_unit_space("ffn", config.ffn_units(), {&shard.ffn_units}, false));
  return check_unit_space("vocabulary", config.vocab_size, {&shard.vocab_rows}, false);
}

Status validate_layout(const GptConfig& config, const std::vector<TpShard>& layout) {
  if (layout.empty()) return invalid_argument("a TP layout needs at least one rank");
  std::vector<const std::vector<int64_t>*> heads, ffn, vocab;
  for (const TpShard& s : layout) {
    heads.push_back(&s.heads);
    ffn.push_back(&s.ffn_units);
    vocab.push_back(&s.vocab_rows);
  }
  NTP_RETURN_IF_ERROR(check_unit_space("head", config.n_head, heads, true));
  NTP_RETURN_IF_ERROR(check_unit_space("ffn", config.ffn_units(), ffn, true));
  return check_unit_space("vocabulary", config.vocab_size, vocab, true);
}

}  // namespace ntp::model
