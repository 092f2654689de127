#include "model/tp_shard.h"

#include "model/unit_lists.h"

namespace ntp::model {
namespace {

// In this order: shuffled_layout draws the spaces' shuffles from one generator in turn.
UnitSpaces<TpShard> spaces(const GptConfig& config) {
  return {{"head", config.n_head, &TpShard::heads},
          {"ffn", config.ffn_units(), &TpShard::ffn_units},
          {"vocabulary", config.vocab_size, &TpShard::vocab_rows}};
}

}  // namespace

TpShard full_shard(const GptConfig& config) { return full_shard_of(spaces(config)); }

std::vector<TpShard> contiguous_layout(const GptConfig& config, int degree) {
  return contiguous_layout_of(spaces(config), degree);
}

std::vector<TpShard> shuffled_layout(const GptConfig& config, int degree, uint64_t seed) {
  return shuffled_layout_of(spaces(config), degree, seed);
}

Status validate_shard(const GptConfig& config, const TpShard& shard) {
  return validate_shard_of(spaces(config), shard);
}

Status validate_layout(const GptConfig& config, const std::vector<TpShard>& layout) {
  return validate_layout_of(spaces(config), layout);
}

}  // namespace ntp::model
