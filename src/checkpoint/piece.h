// PieceSpec: one rectangular piece of one logical tensor's state, the unit a checkpoint stores.
//
// A piece holds either the whole logical tensor (axis = -1, index empty) or the slices
// index[0], index[1], ... of the logical tensor along `axis`, in that order: local shape =
// logical shape with dim `axis` = index.size(), local slice i = logical slice index[i]. Indices
// are distinct, in range, and need not be sorted or contiguous (model::Param uses the same map).
// Data of a piece is float32, row-major in the local shape.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "core/status.h"

namespace ntp::checkpoint {

struct PieceSpec {
  std::string tensor;  // logical tensor name (Hugging Face GPT-2 name)
  std::string kind;    // "value", "exp_avg", "exp_avg_sq" (any short [a-z_] name)
  std::vector<int64_t> logical_shape;
  int axis = -1;               // -1: the whole tensor
  std::vector<int64_t> index;  // logical slice ids along axis (any order)

  bool whole() const { return axis < 0; }
};

// Logical shape with dim `axis` replaced by index.size().
std::vector<int64_t> local_shape(const PieceSpec& spec);
int64_t local_numel(const PieceSpec& spec);

// kInvalidArgument naming the tensor unless: name non-empty, kind 1-32 chars of [a-z_], dims
// >= 0, axis in [-1, rank), index empty for whole pieces, else distinct and in [0, dim).
Status validate_piece_spec(const PieceSpec& spec);

// Half-open runs [begin, end) of consecutive ids, in the order of `index`:
// {4,5,6,0,1,9} -> {[4,7), [0,2), [9,10)}.
using IndexRuns = std::vector<std::pair<int64_t, int64_t>>;
IndexRuns index_to_runs(std::span<const int64_t> index);
std::vector<int64_t> runs_to_index(const IndexRuns& runs);

// "tensor (kind)", for messages.
std::string piece_name(const PieceSpec& spec);

}  // namespace ntp::checkpoint
