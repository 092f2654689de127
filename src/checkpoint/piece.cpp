#include "checkpoint/piece.h"

#include <algorithm>

namespace ntp::checkpoint {

std::vector<int64_t> local_shape(const PieceSpec& spec) {
  std::vector<int64_t> shape = spec.logical_shape;
  if (!spec.whole())
    shape[static_cast<size_t>(spec.axis)] = static_cast<int64_t>(spec.index.size());
  return shape;
}

int64_t local_numel(const PieceSpec& spec) {
  int64_t n = 1;
  for (int64_t d : local_shape(spec)) n *= d;
  return n;
}

std::string piece_name(const PieceSpec& spec) { return spec.tensor + " (" + spec.kind + ")"; }

Status validate_piece_spec(const PieceSpec& spec) {
  const std::string where = "piece of tensor '" + spec.tensor + "' kind '" + spec.kind + "': ";
  if (spec.tensor.empty()) return invalid_argument("piece with an empty tensor name");
  if (spec.kind.empty() || spec.kind.size() > 32 ||
      !std::all_of(spec.kind.begin(), spec.kind.end(),
                   [](char c) { return (c >= 'a' && c <= 'z') || c == '_'; })) {
    return invalid_argument(where + "kind must be 1-32 characters of [a-z_]");
  }
  for (int64_t d : spec.logical_shape) {
    if (d < 0) return invalid_argument(where + "negative dimension in the logical shape");
  }
  const auto rank = static_cast<int>(spec.logical_shape.size());
  if (spec.axis < -1 || spec.axis >= rank) {
    return invalid_argument(where + "axis " + std::to_string(spec.axis) +
                            " out of range for rank " + std::to_string(rank));
  }
  if (spec.whole()) {
    if (!spec.index.empty()) return invalid_argument(where + "a whole-tensor piece has no index");
    return ok_status();
  }
  const int64_t dim = spec.logical_shape[static_cast<size_t>(spec.axis)];
  for (int64_t i : spec.index) {
    if (i < 0 || i >= dim) {
      return invalid_argument(where + "index " + std::to_string(i) + " out of range [0, " +
                              std::to_string(dim) + ")");
    }
  }
  // Repeats: a bitmap when the dimension is not much larger than the index (the usual case),
  // else a sort; memory stays proportional to the index either way.
  if (dim <= 8 * static_cast<int64_t>(spec.index.size()) + 1024) {
    std::vector<bool> seen(static_cast<size_t>(dim), false);
    for (int64_t i : spec.index) {
      if (seen[static_cast<size_t>(i)]) {
        return invalid_argument(where + "index " + std::to_string(i) + " repeated");
      }
      seen[static_cast<size_t>(i)] = true;
    }
    return ok_status();
  }
  std::vector<int64_t> sorted = spec.index;
  std::sort(sorted.begin(), sorted.end());
  auto repeated = std::adjacent_find(sorted.begin(), sorted.end());
  if (repeated != sorted.end()) {
    return invalid_argument(where + "index " + std::to_string(*repeated) + " repeated");
  }
  return ok_status();
}

IndexRuns index_to_runs(std::span<const int64_t> index) {
  IndexRuns runs;
  for (int64_t i : index) {
    if (!runs.empty() && runs.back().second == i) {
      ++runs.back().second;
    } else {
      runs.emplace_back(i, i + 1);
    }
  }
  return runs;
}

std::vector<int64_t> runs_to_index(const IndexRuns& runs) {
  std::vector<int64_t> index;
  for (const auto& [begin, end] : runs) {
    for (int64_t i = begin; i < end; ++i) index.push_back(i);
  }
  return index;
}

}  // namespace ntp::checkpoint
