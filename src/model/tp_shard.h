// TpShard: which units of each unit space (model/gpt_config.h) one TP rank holds.
//
// A plain struct of unit ids, independent of shard/ internals: any assignment is valid as long as
// every unit of every space goes to exactly one rank of the replica. Units need not be contiguous
// or sorted; a rank's local tensors store its units in the order listed here. A rank may hold no
// unit of a space (its contribution to that space's partial sums is then zero).
#pragma once

#include <cstdint>
#include <vector>

#include "core/status.h"
#include "model/gpt_config.h"
#include "model/unit_lists.h"

namespace ntp::model {

struct TpShard {
  std::vector<int64_t> heads;
  std::vector<int64_t> ffn_units;
  std::vector<int64_t> vocab_rows;
};

// The spaces in order: head, ffn, vocabulary. With model/unit_lists.h this gives TpShard's
// full_shard, contiguous_layout, shuffled_layout, validate_shard and validate_layout.
UnitSpaces<TpShard> unit_spaces(const GptConfig& config);

}  // namespace ntp::model
