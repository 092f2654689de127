#include "checkpoint/model_pieces.h"

#include <numeric>

#include "core/check.h"

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

namespace {

std::vector<PieceView> replicated_views(const model::Param& p, const std::string& kind,
                                        std::span<const float> data, const SpreadSlot& slot,
                                        const SpreadOptions& options) {
  const int64_t rows = p.logical_shape.empty() ? 1 : p.logical_shape[0];
  const IndexRuns share = replicated_share(p.name + ":" + kind, rows,
                                           static_cast<int64_t>(data.size_bytes()), slot, options);
  if (share.empty() || share[0].first == share[0].second) return {};
  const auto [begin, end] = share[0];
  if (begin == 0 && end == rows) return {{param_piece(p, kind), data}};
  const auto inner = static_cast<int64_t>(data.size()) / rows;
  PieceSpec spec{p.name, kind, p.logical_shape, 0,
                 std::vector<int64_t>(static_cast<size_t>(end - begin))};
  std::iota(spec.index.begin(), spec.index.end(), begin);
  return {{std::move(spec), data.subspan(static_cast<size_t>(begin * inner),
                                         static_cast<size_t>((end - begin) * inner))}};
}

}  // namespace

std::vector<PieceView> spread_param_views(const model::Param& p, const std::string& kind,
                                          std::span<const float> data, const SpreadSlot& slot,
                                          const SpreadOptions& options) {
  NTP_CHECK(static_cast<int64_t>(data.size()) == p.value.numel());
  if (p.replicated()) return replicated_views(p, kind, data, slot, options);
  // Storage [outer, n_local, inner]; along the shard axis [groups, units, slices] (model/param.h).
  const auto axis = static_cast<size_t>(p.shard_axis);
  int64_t before = 1, after = 1;
  for (size_t d = 0; d < axis; ++d) before *= p.logical_shape[d];
  for (size_t d = axis + 1; d < p.logical_shape.size(); ++d) after *= p.logical_shape[d];
  const int64_t outer = p.unit_outer, inner = p.unit_inner;
  const int64_t groups = outer / before, slices = inner / after;
  NTP_CHECK(groups * before == outer && slices * after == inner);
  const int64_t units = shape_numel(p.logical_shape) / (outer * inner);
  const int64_t n_local = p.local_units();
  const IndexRuns share =
      sharded_share(p.name + ":" + kind, units, shape_numel(p.logical_shape) * 4, slot, options);
  auto written = [&](int64_t ul) {
    if (!p.unit_copy.empty() && p.unit_copy[static_cast<size_t>(ul)] != 0) return false;
    const int64_t u = p.logical_index[static_cast<size_t>(ul * slices)] / slices;
    return std::any_of(share.begin(), share.end(),
                       [u](const auto& run) { return run.first <= u && u < run.second; });
  };
  std::vector<PieceView> out;
  for (int64_t p0 = 0; p0 < n_local;) {
    if (!written(p0)) {
      ++p0;
      continue;
    }
    int64_t p1 = p0 + 1;
    while (p1 < n_local && written(p1)) ++p1;
    if (p0 == 0 && p1 == n_local) return {{param_piece(p, kind), data}};
    PieceSpec spec{p.name, kind, p.logical_shape, p.shard_axis, {}};
    for (int64_t g = 0; g < groups; ++g) {
      for (int64_t ul = p0; ul < p1; ++ul) {
        for (int64_t e = 0; e < slices; ++e) {
          spec.index.push_back(
              p.logical_index[static_cast<size_t>((g * n_local + ul) * slices + e)]);
        }
      }
    }
    const int64_t row = (p1 - p0) * inner, stride = n_local * inner;
    const std::span<const float> first = data.subspan(static_cast<size_t>(p0 * inner));
    if (outer == 1) {
      out.push_back({std::move(spec), first.first(static_cast<size_t>(row))});
    } else {
      out.push_back({std::move(spec), first.first(static_cast<size_t>((outer - 1) * stride + row)),
                     row, stride});
    }
    p0 = p1;
  }
  return out;
}

}  // namespace ntp::checkpoint
