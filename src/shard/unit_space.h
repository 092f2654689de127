// Unit spaces: the dimensions tensor parallelism splits, counted in units that must stay whole.
//
//   heads  one attention head: its columns of Q, K and V (and their biases) plus its rows of the
//          attention output projection, in every layer.
//   ffn    a block of `ffn_block` FFN columns: columns of fc1 (and bias) plus the matching rows of
//          fc2, in every layer.
//   vocab  one vocabulary row of the tied embedding / LM head (once, not per layer).
//
// A grouped-query-attention shape (ModelShape::kv_heads > 0, the Llama family) has five spaces:
//   heads      one query head: its rows of the query projection and its columns of the output
//              projection, in every layer (no biases).
//   ffn        a block of gated-FFN columns: gate and up rows plus the matching down columns.
//   vocab      one row of the token embedding.
//   kv         one key/value head: its rows of the key and value projections, in every layer. A
//              *derived* space: its owners follow from the heads (unit g goes with head g * heads
//              / kv_heads); the other ranks whose query heads read the group hold copies that the
//              layout does not list (the model marks them, model/param.h unit_copy).
//   head_rows  one row of the untied LM head.
// A Mixture-of-Experts shape (also ModelShape::experts > 0, the MoE family) has no dense FFN and
// a sixth space:
//   ffn        the shared experts' fused columns (shared_experts * ffn of them, in blocks of
//              ffn_block), as Llama's FFN; without shared experts empty (0 units, marked derived
//              so that no rank must hold one: the space numbering stays Llama's).
//   experts    one routed expert: its w1, w2 and w3 (3 ffn x hidden, ffn = one expert's width),
//              in every layer; each held by exactly one rank of the replica.
// The order of the spaces is the numbering of model::UnitSpaceId (model/param.h): space i of a
// layout is the model's space i, which train/unit_blocks.h relies on.
//
// Parameters every rank holds in full (norms, row-parallel biases, position embeddings) are
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
  // A derived space (>= 0): unit g is held by the rank holding unit g * source_stride of space
  // `derived_from`, in every layout; it is never balanced on its own and a rank may hold none.
  int derived_from = -1;
  std::int64_t source_stride = 1;

  bool derived() const { return derived_from >= 0; }
};

// The model shape that gives unit spaces their sizes and byte counts.
struct ModelShape {
  std::int64_t heads = 0;
  std::int64_t hidden = 0;     // model width; a multiple of heads
  std::int64_t ffn = 0;        // FFN width in columns; a multiple of ffn_block
  std::int64_t ffn_block = 1;  // FFN columns per unit
  std::int64_t vocab = 0;      // 0: no vocabulary-parallel space
  std::int64_t layers = 1;
  // Grouped-query attention with this many key/value heads (0: none; K and V go with each head,
  // GPT-2 style). With kv_heads > 0 the shape is the Llama family's: no biases, a gated FFN, an
  // untied LM head, and the five spaces listed at the top.
  std::int64_t kv_heads = 0;
  std::int64_t head_dim = 0;  // 0: hidden / heads
  // Routed experts of a MoE shape (0: none; needs kv_heads > 0). ffn is then one expert's width.
  std::int64_t experts = 0;
  std::int64_t shared_experts = 0;  // MoE: shared experts, each ffn wide (the ffn space's columns)
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

// The unit spaces of a GPT-style decoder: heads, ffn and (when vocab > 0) vocab, in that order;
// with kv_heads > 0: heads, ffn, vocab, kv (derived from heads), head_rows (vocab must be > 0);
// with experts > 0 too: the ffn space empty, then experts.
std::vector<UnitSpace> model_unit_spaces(const ModelShape& shape);

}  // namespace ntp::shard
