#include "model/tp_shard.h"

namespace ntp::model {

UnitSpaces<TpShard> unit_spaces(const GptConfig& config) {
  return {{"head", config.n_head, &TpShard::heads},
          {"ffn", config.ffn_units(), &TpShard::ffn_units},
          {"vocabulary", config.vocab_size, &TpShard::vocab_rows}};
}

}  // namespace ntp::model
