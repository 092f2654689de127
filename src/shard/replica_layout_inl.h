// Template definitions for replica_layout.h.
#pragma once

#include <algorithm>

namespace ntp::shard {

template <typename Fn>
void for_each_owned_piece(const std::vector<OwnedRange>& owners, const IntervalSet& units,
                          Fn&& fn) {
  for (const Interval& want : units.intervals()) {
    auto it = std::upper_bound(owners.begin(), owners.end(), want.begin,
                               [](std::int64_t v, const OwnedRange& o) { return v < o.units.end; });
    for (; it != owners.end() && it->units.begin < want.end; ++it) {
      const Interval piece{std::max(want.begin, it->units.begin),
                           std::min(want.end, it->units.end)};
      if (piece.begin < piece.end) fn(piece, it->slot);
    }
  }
}

}  // namespace ntp::shard
