// Param: one named model tensor as a rank stores it, plus the map back to the logical tensor.
//
// The logical tensor is Hugging Face GPT2LMHeadModel's (name and shape, Conv1D weights stored
// [in, out]). A rank stores either the whole tensor (shard_axis = -1, replicated on every TP rank)
// or a subset of the slices along one axis: local slice i along `shard_axis` is logical slice
// logical_index[i]. Local shape = logical shape with that dimension = logical_index.size().
//
// A sharded tensor also knows its TP unit space (model/gpt_config.h): viewed as
// [unit_outer, units, unit_inner], every unit of the space owns one whole [unit_outer, 1,
// unit_inner] slab, and a rank stores [unit_outer, local units, unit_inner] with its units in the
// order of its TpShard. c_attn.weight [C, 3C] for instance is [C * 3, n_head, head_dim].
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "tensor/tensor.h"

namespace ntp::model {

// The unit spaces, in the order of shard::model_unit_spaces (heads, ffn, vocab). Llama
// (model/llama_config.h) uses kHeads for its query heads, kFfn, kVocab for embed_tokens, and two
// of its own that shard/ does not list yet: kKvGroups (derived from the query heads, a unit may be
// held by several ranks, see unit_copy) and kHeadRows (rows of the untied lm_head). The MoE model
// (model/moe_model.h) adds kExperts: one routed expert of every layer.
enum class UnitSpaceId : int {
  kNone = -1,
  kHeads = 0,
  kFfn = 1,
  kVocab = 2,
  kKvGroups = 3,
  kHeadRows = 4,
  kExperts = 5
};

struct Param {
  std::string name;
  std::vector<int64_t> logical_shape;
  int shard_axis = -1;                     // -1: replicated
  std::vector<int64_t> logical_index;      // used when shard_axis >= 0
  UnitSpaceId space = UnitSpaceId::kNone;  // kNone exactly when replicated
  int64_t unit_outer = 1;                  // see the top of this file
  int64_t unit_inner = 1;
  // Per local unit (empty: none): 1 where this rank's copy duplicates a unit another rank of
  // the same TP replica owns (Llama's KV groups whose query heads span ranks). Such a copy has the
  // same value and, after the model's in-replica reduction, the same gradient as the owner's; it
  // must be skipped wherever a logical element is to be counted once (gradient norms, the DP
  // reduction's contribution, ZeRO-1 partitions, optimizer state, checkpoints, reshard sources).
  std::vector<uint8_t> unit_copy;
  Tensor value;  // local shape
  Tensor grad;   // local shape, accumulated by backward

  bool replicated() const { return shard_axis < 0; }
  // Units this rank stores: local shape = [unit_outer, local_units(), unit_inner] when sharded.
  int64_t local_units() const { return value.numel() / (unit_outer * unit_inner); }
  std::vector<int64_t> local_shape() const;
  // The local unit that local flat element i belongs to (sharded tensors only).
  int64_t local_unit(int64_t local_flat) const;
  // False when local flat element i lies in a unit_copy unit (see above).
  bool counted(int64_t local_flat) const;
  // Logical flat (row-major) offset of local flat element i.
  int64_t logical_offset(int64_t local_flat) const;
  // logical[logical_offset(i)] = local[i] for every local element i (the rest untouched).
  void scatter_to_logical(std::span<const float> local, std::span<float> logical) const;
  // local[i] = logical[logical_offset(i)].
  void gather_from_logical(std::span<const float> logical, std::span<float> local) const;
};

}  // namespace ntp::model
