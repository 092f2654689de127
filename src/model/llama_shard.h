// LlamaShard: which units of each Llama unit space (model/llama_config.h) one TP rank holds, and
// the KV groups that follow from its query heads.
//
// Same rules as TpShard (model/tp_shard.h): plain lists of unit ids, any assignment is valid as
// long as every unit of every space is on exactly one rank of the replica; order = local storage
// order; a rank may hold no unit of a space. KV groups are not assigned: a rank holds (in
// ascending order) every group one of its query heads reads. A group whose query heads are on
// several ranks is held by each; its owner (the copy that is counted: norms, optimizer state,
// checkpoints) is the rank holding the group's first query head, g * q_per_kv, so every rank
// knows locally which of its groups it owns.
#pragma once

#include <cstdint>
#include <vector>

#include "core/status.h"
#include "model/llama_config.h"
#include "model/unit_lists.h"

namespace ntp::model {

struct LlamaShard {
  std::vector<int64_t> heads;       // query heads
  std::vector<int64_t> ffn_units;   // SwiGLU column blocks
  std::vector<int64_t> vocab_rows;  // rows of embed_tokens
  std::vector<int64_t> head_rows;   // rows of lm_head
};

// The KV groups the shard's query heads read, ascending.
std::vector<int64_t> kv_groups(const LlamaConfig& config, const LlamaShard& shard);
// True when this shard holds group g's first query head (it owns the group's counted copy).
bool owns_kv_group(const LlamaConfig& config, const LlamaShard& shard, int64_t g);

// The spaces in order: query head, ffn, vocabulary, lm_head row. With model/unit_lists.h this
// gives LlamaShard's full_shard, contiguous_layout, shuffled_layout, validate_shard and
// validate_layout.
UnitSpaces<LlamaShard> unit_spaces(const LlamaConfig& config);

}  // namespace ntp::model
