// The bridge between model::Param and checkpoint pieces: how the trainer names what it saves and
// what it asks for on load. A Param's layout (shard_axis, logical_index) is exactly a PieceSpec's
// (axis, index), so a rank's pieces are its params' own tensors, whatever its TP layout.
#pragma once

#include <span>
#include <string>
#include <vector>

#include "checkpoint/piece.h"
#include "checkpoint/shard_writer.h"
#include "model/param.h"

namespace ntp::checkpoint {

// The piece of `kind` ("value", "exp_avg", ...) that `param` describes on this rank.
PieceSpec param_piece(const model::Param& param, std::string kind);

// One PieceView per param holding its value (kind "value"); `include_replicated` false skips the
// replicated params (the trainer lets one rank per replica write those).
std::vector<PieceView> param_value_views(std::span<const model::Param> params,
                                         bool include_replicated = true);

}  // namespace ntp::checkpoint
