#include "checkpoint/coverage.h"

#include <algorithm>
#include <map>
#include <utility>

namespace ntp::checkpoint {
namespace {

int64_t numel_of(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

Status check_one(const std::string& what, const std::vector<const PieceRecord*>& pieces) {
  const std::vector<int64_t>& shape = pieces.front()->spec.logical_shape;
  int whole = 0;
  int axis = -2;
  for (const PieceRecord* p : pieces) {
    if (p->spec.whole()) {
      ++whole;
    } else if (!p->spec.index.empty()) {
      if (axis != -2 && axis != p->spec.axis) {
        return invalid_argument(what + ": pieces split it along axes " + std::to_string(axis) +
                                " and " + std::to_string(p->spec.axis) +
                                ", so some elements are held twice");
      }
      axis = p->spec.axis;
    }
  }
  const int64_t numel = numel_of(shape);
  if (whole > 0 && (whole > 1 || axis != -2) && numel > 0) {
    return invalid_argument(what +
                            ": a whole-tensor piece and other pieces hold the same elements");
  }
  if (whole == 1 || numel == 0) return ok_status();
  if (axis == -2) return invalid_argument(what + ": no piece holds any element");
  // The first slice held 0 or 2+ times, in increasing slice order. Memory is bounded by what the
  // pieces hold, never by the (untrusted) logical shape: counts per slice when the dimension is
  // not much larger than the number of ids, else a sort of the ids.
  const int64_t dim = shape[static_cast<size_t>(axis)];
  const std::string along = " along axis " + std::to_string(axis);
  auto held_twice = [&](int64_t v) {
    return invalid_argument(what + ": slice " + std::to_string(v) + along +
                            " is held by more than one piece");
  };
  auto missing = [&](int64_t v) {
    return invalid_argument(what + ": slice " + std::to_string(v) + along +
                            " is held by no piece (a piece is missing)");
  };
  int64_t total = 0;
  for (const PieceRecord* p : pieces) total += static_cast<int64_t>(p->spec.index.size());
  if (dim <= 4 * total + 1024) {
    std::vector<uint8_t> count(static_cast<size_t>(dim), 0);
    for (const PieceRecord* p : pieces) {
      for (int64_t i : p->spec.index) {
        uint8_t& c = count[static_cast<size_t>(i)];
        if (c < 2) ++c;
      }
    }
    for (int64_t i = 0; i < dim; ++i) {
      if (count[static_cast<size_t>(i)] == 0) return missing(i);
      if (count[static_cast<size_t>(i)] > 1) return held_twice(i);
    }
    return ok_status();
  }
  std::vector<int64_t> ids;
  for (const PieceRecord* p : pieces) {
    ids.insert(ids.end(), p->spec.index.begin(), p->spec.index.end());
  }
  std::sort(ids.begin(), ids.end());
  int64_t expected = 0;
  for (int64_t v : ids) {
    if (v < expected) return held_twice(v);
    if (v > expected) break;
    expected = v + 1;
  }
  if (expected < dim) return missing(expected);
  return ok_status();
}

}  // namespace

Status check_coverage(const std::vector<PieceRecord>& pieces) {
  std::map<std::pair<std::string, std::string>, std::vector<const PieceRecord*>> groups;
  std::map<std::string, const PieceRecord*> shape_of;
  for (const PieceRecord& p : pieces) {
    auto [it, inserted] = shape_of.emplace(p.spec.tensor, &p);
    if (!inserted && it->second->spec.logical_shape != p.spec.logical_shape) {
      return invalid_argument("tensor " + p.spec.tensor +
                              ": pieces disagree on its logical shape (" + it->second->file +
                              " vs " + p.file + ")");
    }
    groups[{p.spec.tensor, p.spec.kind}].push_back(&p);
  }
  for (const auto& [key, group] : groups) {
    NTP_RETURN_IF_ERROR(check_one("tensor " + key.first + " (" + key.second + ")", group));
  }
  return ok_status();
}

}  // namespace ntp::checkpoint
