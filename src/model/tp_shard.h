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

namespace ntp::model {

struct TpShard {
  std::vector<int64_t> heads;
  std::vector<int64_t> ffn_units;
  std::vector<int64_t> vocab_rows;
};

// Every unit of every space (degree 1).
TpShard full_shard(const GptConfig& config);

// `degree` ranks, each space split into balanced contiguous blocks (Megatron's uniform layout
// when the degree divides the unit count).
std::vector<TpShard> contiguous_layout(const GptConfig& config, int degree);

// `degree` ranks, balanced (per space, unit counts differ by at most one), units of each space
// shuffled by `seed` before dealing: non-contiguous and unordered, the awkward case on purpose.
std::vector<TpShard> shuffled_layout(const GptConfig& config, int degree, uint64_t seed);

// kInvalidArgument unless every unit of every space appears in exactly one shard.
Status validate_layout(const GptConfig& config, const std::vector<TpShard>& layout);
// kInvalidArgument unless the shard's ids are in range and distinct.
Status validate_shard(const GptConfig& config, const TpShard& shard);

}  // namespace ntp::model
