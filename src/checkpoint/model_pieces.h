// The bridge between model::Param and checkpoint pieces: how the trainer names what it saves and
// what it asks for on load. A Param's layout (shard_axis, logical_index) is exactly a PieceSpec's
// (axis, index), so a rank's pieces are its params' own tensors, whatever its TP layout.
#pragma once

#include <span>
#include <string>
#include <vector>

#include "checkpoint/piece.h"
#include "checkpoint/shard_writer.h"
#include "checkpoint/spread.h"
#include "model/param.h"

namespace ntp::checkpoint {

// The piece of `kind` ("value", "exp_avg", ...) that `param` describes on this rank.
PieceSpec param_piece(const model::Param& param, std::string kind);

// One PieceView per param holding its value (kind "value"); `include_replicated` false skips the
// replicated params (the trainer lets one rank per replica write those).
std::vector<PieceView> param_value_views(std::span<const model::Param> params,
                                         bool include_replicated = true);

// The pieces of `data` (param's local storage, or its moments: param's local shape) that writer
// `slot` writes of kind `kind` under the spread rule (checkpoint/spread.h), as views into `data`
// (strided when param's unit_outer > 1). Units marked in param.unit_copy are left to the rank
// that owns them. A replicated tensor's share is one whole piece when it is all rows, else rows
// along axis 0; a sharded one's is one piece per run of consecutive local units in the share: at
// most two when the local storage lists its units in increasing order (the trainer's model shards
// do); any other order is as correct, in more pieces.
std::vector<PieceView> spread_param_views(const model::Param& param, const std::string& kind,
                                          std::span<const float> data, const SpreadSlot& slot,
                                          const SpreadOptions& options = {});

}  // namespace ntp::checkpoint
