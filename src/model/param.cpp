#include "model/param.h"

#include "core/check.h"

namespace ntp::model {

std::vector<int64_t> Param::local_shape() const {
  std::vector<int64_t> shape = logical_shape;
  if (!replicated())
    shape[static_cast<size_t>(shard_axis)] = static_cast<int64_t>(logical_index.size());
  return shape;
}

int64_t Param::local_unit(int64_t local_flat) const {
  NTP_CHECK(!replicated());
  return (local_flat / unit_inner) % local_units();
}

bool Param::counted(int64_t local_flat) const {
  return unit_copy.empty() || unit_copy[static_cast<size_t>(local_unit(local_flat))] == 0;
}

int64_t Param::logical_offset(int64_t local_flat) const {
  if (replicated()) return local_flat;
  const auto axis = static_cast<size_t>(shard_axis);
  int64_t inner = 1;
  for (size_t d = axis + 1; d < logical_shape.size(); ++d) inner *= logical_shape[d];
  const int64_t local_dim = static_cast<int64_t>(logical_index.size());
  const int64_t in = local_flat % inner;
  const int64_t i = (local_flat / inner) % local_dim;
  const int64_t outer = local_flat / inner / local_dim;
  return (outer * logical_shape[axis] + logical_index[static_cast<size_t>(i)]) * inner + in;
}

void Param::scatter_to_logical(std::span<const float> local, std::span<float> logical) const {
  NTP_CHECK(static_cast<int64_t>(logical.size()) == shape_numel(logical_shape));
  for (size_t i = 0; i < local.size(); ++i) {
    logical[static_cast<size_t>(logical_offset(static_cast<int64_t>(i)))] = local[i];
  }
}

void Param::gather_from_logical(std::span<const float> logical, std::span<float> local) const {
  NTP_CHECK(static_cast<int64_t>(logical.size()) == shape_numel(logical_shape));
  for (size_t i = 0; i < local.size(); ++i) {
    local[i] = logical[static_cast<size_t>(logical_offset(static_cast<int64_t>(i)))];
  }
}

}  // namespace ntp::model
