#include "shard/replica_layout.h"

#include <algorithm>

namespace ntp::shard {

std::int64_t ReplicaLayout::max_units(int space) const {
  std::int64_t most = 0;
  for (const IntervalSet& s : units[static_cast<std::size_t>(space)])
    most = std::max(most, s.count());
  return most;
}

double ReplicaLayout::imbalance(int space) const {
  std::int64_t total = 0;
  for (const IntervalSet& s : units[static_cast<std::size_t>(space)]) total += s.count();
  if (total == 0) return 1.0;
  return static_cast<double>(max_units(space)) * degree() / static_cast<double>(total);
}

std::vector<OwnedRange> ReplicaLayout::owner_map(int space) const {
  std::vector<OwnedRange> owners;
  const auto& per_rank = units[static_cast<std::size_t>(space)];
  for (std::size_t r = 0; r < per_rank.size(); ++r) {
    for (const Interval& i : per_rank[r].intervals()) owners.push_back({i, slots[r]});
  }
  std::sort(owners.begin(), owners.end(),
            [](const OwnedRange& a, const OwnedRange& b) { return a.units.begin < b.units.begin; });
  return owners;
}

void derive_units(RankUnits& units, const std::vector<UnitSpace>& spaces) {
  for (std::size_t sp = 0; sp < spaces.size(); ++sp) {
    const UnitSpace& space = spaces[sp];
    if (!space.derived()) continue;
    const std::vector<IntervalSet>& source = units[static_cast<std::size_t>(space.derived_from)];
    std::vector<IntervalSet> derived(source.size());
    for (std::int64_t g = 0; g < space.units; ++g) {
      for (std::size_t r = 0; r < source.size(); ++r) {
        if (source[r].contains(g * space.source_stride)) derived[r].append(g, g + 1);
      }
    }
    units[sp] = std::move(derived);
  }
}

}  // namespace ntp::shard
