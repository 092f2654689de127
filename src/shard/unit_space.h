// Unit spaces: the dimensions tensor parallelism splits, counted in units that must stay whole.
//
//   heads  one attention head: its columns of Q, K and V (and their biases) plus its rows of the
//          attention output projection, in every layer.
//   ffn    a block of `ffn_block` FFN columns: columns of fc1 (and bias) plus the matching rows of
//          fc2, in every layer.
//   vocab  one vocabulary row of the tied embedding / LM head (once, not per layer).
//
// Parameters every rank holds in full (LayerNorms, row-parallel biases, position embeddings) are
// not in any unit space: they are replicated within a replica and synchronized once per replica.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"

namespace ntp::shard {

struct UnitSpace {
  std::string name;                  // "heads", "ffn", "vocab"
  std::int64_t units = 0;            // how many whole units the space has
  std::int64_t params_per_unit = 0;  // parameters one unit carries (all layers)
};

// The model shape that gives unit spaces their sizes and byte counts.
struct ModelShape {
  std::int64_t heads = 0;
  std::int64_t hidden = 0;     // model width; a multiple of heads
  std::int64_t ffn = 0;        // FFN width in columns; a multiple of ffn_block
  std::int64_t ffn_block = 1;  // FFN columns per unit
  std::int64_t vocab = 0;      // 0: no vocabulary-parallel space
  std::int64_t layers = 1;
};

// Bytes per parameter for the two kinds of traffic the plans count.
struct ByteCosts {
  // Gradient bytes per parameter in the DP reduction and the fold/unfold (fp32 gradients).
  std::int64_t grad_bytes = 4;
  // Bytes per parameter a reshard moves: bf16 weight (2) + fp32 master weight and Adam moments
  // (12).
  std::int64_t state_bytes = 14;
};

// Checks the shape (positive sizes, hidden % heads == 0, ffn % ffn_block == 0); the error names
// the flag and value to fix.
Status validate_model_shape(const ModelShape& shape);

// The unit spaces of a GPT-style decoder: heads, ffn and (when vocab > 0) vocab, in that order.
std::vector<UnitSpace> model_unit_spaces(const ModelShape& shape);

}  // namespace ntp::shard
