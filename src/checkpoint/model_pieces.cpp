#include "checkpoint/model_pieces.h"

namespace ntp::checkpoint {

PieceSpec param_piece(const model::Param& param, std::string kind) {
  PieceSpec spec;
  spec.tensor = param.name;
  spec.kind = std::move(kind);
  spec.logical_shape = param.logical_shape;
  spec.axis = param.shard_axis;
  if (!param.replicated()) spec.index = param.logical_index;
  return spec;
}

std::vector<PieceView> param_value_views(std::span<const model::Param> params,
                                         bool include_replicated) {
  std::vector<PieceView> views;
  for (const model::Param& p : params) {
    if (p.replicated() && !include_replicated) continue;
    views.push_back({param_piece(p, "value"), p.value.span()});
  }
  return views;
}

}  // namespace ntp::checkpoint
