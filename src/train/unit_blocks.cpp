#include "train/unit_blocks.h"

#include <algorithm>
#include <cstring>

#include "core/check.h"

namespace ntp::train {

ParamGeometry ParamGeometry::of(const model::Param& param) {
  ParamGeometry g;
  if (param.replicated()) {
    g.units = param.logical_shape.empty() ? 1 : param.logical_shape[0];
    g.inner = shape_numel(param.logical_shape) / g.units;
    return g;
  }
  g.outer = param.unit_outer;
  g.inner = param.unit_inner;
  g.units = shape_numel(param.logical_shape) / (g.outer * g.inner);
  g.space = static_cast<int>(param.space);
  return g;
}

void BlockLayout::add(int param, shard::IntervalSet units, const ParamGeometry& geometry) {
  if (units.empty()) return;
  const int64_t n = geometry.outer * units.count() * geometry.inner;
  blocks_.push_back({param, std::move(units), size_});
  size_ += n;
}

shard::IntervalSet take_positions(const shard::IntervalSet& set, int64_t begin, int64_t end) {
  shard::IntervalSet out;
  int64_t pos = 0;
  for (const shard::Interval& run : set.intervals()) {
    const int64_t lo = std::max(begin, pos), hi = std::min(end, pos + run.size());
    if (lo < hi) out.append(run.begin + lo - pos, run.begin + hi - pos);
    pos += run.size();
    if (pos >= end) break;
  }
  return out;
}

Block local_block(int param, const shard::IntervalSet& units) { return {param, units, 0}; }

int64_t copy_shared_units(const ParamGeometry& g, const Block& from, const float* from_base,
                          const Block& to, float* to_base) {
  NTP_CHECK(from.param == to.param);
  const int64_t from_count = from.units.count(), to_count = to.units.count();
  const float* src = from_base + from.offset;
  float* dst = to_base + to.offset;
  int64_t copied = 0;
  // Walk both interval lists, tracking each run's position inside its block.
  const auto& a = from.units.intervals();
  const auto& b = to.units.intervals();
  size_t i = 0, j = 0;
  int64_t a_pos = 0, b_pos = 0;  // position of a[i].begin / b[j].begin within their blocks
  while (i < a.size() && j < b.size()) {
    const int64_t lo = std::max(a[i].begin, b[j].begin);
    const int64_t hi = std::min(a[i].end, b[j].end);
    if (lo < hi) {
      const int64_t run = (hi - lo) * g.inner;
      const int64_t fa = (a_pos + lo - a[i].begin) * g.inner;
      const int64_t fb = (b_pos + lo - b[j].begin) * g.inner;
      for (int64_t o = 0; o < g.outer; ++o) {
        std::memcpy(dst + o * to_count * g.inner + fb, src + o * from_count * g.inner + fa,
                    static_cast<size_t>(run) * sizeof(float));
      }
      copied += run * g.outer;
    }
    if (a[i].end < b[j].end) {
      a_pos += a[i].size();
      ++i;
    } else {
      b_pos += b[j].size();
      ++j;
    }
  }
  return copied;
}

std::vector<int64_t> slice_ids(const model::Param& param, const ParamGeometry& g,
                               const shard::IntervalSet& units) {
  const int axis = param.replicated() ? 0 : param.shard_axis;
  int64_t before = 1, after = 1;
  for (int d = 0; d < axis; ++d) before *= param.logical_shape[static_cast<size_t>(d)];
  for (size_t d = static_cast<size_t>(axis) + 1; d < param.logical_shape.size(); ++d) {
    after *= param.logical_shape[d];
  }
  // The axis is [groups, units, slices per unit]: outer = before * groups, inner = slices * after.
  const int64_t groups = g.outer / before;
  const int64_t slices = g.inner / after;
  NTP_CHECK(groups * before == g.outer && slices * after == g.inner);
  std::vector<int64_t> out;
  out.reserve(static_cast<size_t>(groups * units.count() * slices));
  for (int64_t gi = 0; gi < groups; ++gi) {
    for (const shard::Interval& run : units.intervals()) {
      for (int64_t u = run.begin; u < run.end; ++u) {
        for (int64_t e = 0; e < slices; ++e) out.push_back((gi * g.units + u) * slices + e);
      }
    }
  }
  return out;
}

}  // namespace ntp::train
