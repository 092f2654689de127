// Descriptions for the ZeRO-1 moment plan (train/moment_plan.h), shared by its test and its
// benchmark, and the plan computed the way it was before the index: every need scans every
// holding of its parameter. The scan is the reference the indexed plan must match exactly.
#pragma once

#include <algorithm>
#include <cstdint>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "train/moment_plan.h"

namespace ntp::train::testing {

// A re-formation of a ZeRO-1 job of `members` over `params` parameters of `units` units each:
// every unit of every parameter had one owner and its copy on the owner's next member; member
// `members / 2` is lost (the new world's ranks are the survivors in order), and the survivors
// need the units again in contiguous shares. With `scrambled`, cuts, owners and copy holders
// are drawn from `seed` and some holdings overlap (a unit owned twice), so that the order of
// sources decides which one gives it.
inline std::vector<std::vector<MomentItem>> reshard_case(int members, int params, int units,
                                                         bool scrambled, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  const int lost = members / 2, survivors = members - 1;
  auto rank_of = [lost](int old) { return old < lost ? old : old - 1; };  // -1 past the lost
  auto cuts = [&](int pieces) {  // pieces + 1 boundaries of [0, units)
    std::vector<std::int64_t> at{0, units};
    for (int k = 1; k < pieces; ++k) {
      at.push_back(scrambled ? static_cast<std::int64_t>(rng() % static_cast<unsigned>(units))
                             : static_cast<std::int64_t>(units) * k / pieces);
    }
    std::sort(at.begin(), at.end());
    return at;
  };
  std::vector<std::vector<MomentItem>> items(static_cast<std::size_t>(survivors));
  std::vector<int> chunks(static_cast<std::size_t>(survivors), 0);
  auto hold = [&](int old, std::int64_t kind, int param, std::int64_t begin, std::int64_t end) {
    if (old == lost || begin >= end) return;
    const auto r = static_cast<std::size_t>(rank_of(old));
    items[r].push_back({kind, chunks[r]++, 0, param, shard::IntervalSet::range(begin, end)});
  };
  for (int p = 0; p < params; ++p) {
    const std::vector<std::int64_t> owned = cuts(members);
    for (int i = 0; i < members; ++i) {
      const int owner = scrambled ? static_cast<int>(rng() % static_cast<unsigned>(members)) : i;
      const int copy = (owner + 1 + (scrambled ? static_cast<int>(rng() % 3) : 0)) % members;
      hold(owner, MomentItem::kOwned, p, owned[static_cast<std::size_t>(i)],
           owned[static_cast<std::size_t>(i) + 1]);
      hold(copy, MomentItem::kCopy, p, owned[static_cast<std::size_t>(i)],
           owned[static_cast<std::size_t>(i) + 1]);
    }
    if (scrambled) {  // a few units owned twice
      for (int k = 0; k < members / 4; ++k) {
        const auto begin = static_cast<std::int64_t>(rng() % static_cast<unsigned>(units));
        hold(static_cast<int>(rng() % static_cast<unsigned>(members)), MomentItem::kOwned, p, begin,
             std::min<std::int64_t>(units, begin + 1 + static_cast<std::int64_t>(rng() % 4)));
      }
    }
    const std::vector<std::int64_t> needed = cuts(survivors);
    for (int r = 0; r < survivors; ++r) {
      const std::int64_t begin = needed[static_cast<std::size_t>(r)];
      const std::int64_t end = needed[static_cast<std::size_t>(r) + 1];
      if (begin >= end) continue;
      items[static_cast<std::size_t>(r)].push_back(
          {MomentItem::kNeeded, r, 0, p, shard::IntervalSet::range(begin, end)});
    }
  }
  return items;
}

inline std::vector<std::string> param_names(int params) {
  std::vector<std::string> names;
  for (int p = 0; p < params; ++p) names.push_back("p" + std::to_string(p));
  return names;
}

// The plan by scanning every holding of a need's parameter (the code before the index); the
// same source order as plan_moment_transfers. Returns false when some need is not covered.
inline bool plan_by_scan(const std::vector<std::vector<MomentItem>>& items, int params,
                         std::vector<MomentTransfer>& out) {
  struct Holding {
    int rank;
    const MomentItem* item;
  };
  std::vector<std::vector<Holding>> holders(static_cast<std::size_t>(params));
  for (std::size_t r = 0; r < items.size(); ++r) {
    for (const MomentItem& item : items[r]) {
      if (item.kind != MomentItem::kNeeded) {
        holders[static_cast<std::size_t>(item.param)].push_back({static_cast<int>(r), &item});
      }
    }
  }
  for (std::size_t r = 0; r < items.size(); ++r) {
    for (const MomentItem& need : items[r]) {
      if (need.kind != MomentItem::kNeeded) continue;
      shard::IntervalSet remaining = need.units;
      const std::pair<bool, std::int64_t> order[] = {{true, MomentItem::kOwned},
                                                     {true, MomentItem::kCopy},
                                                     {false, MomentItem::kOwned},
                                                     {false, MomentItem::kCopy}};
      for (const auto& [self, kind] : order) {
        for (const Holding& h : holders[static_cast<std::size_t>(need.param)]) {
          if ((h.rank == static_cast<int>(r)) != self || h.item->kind != kind) continue;
          shard::IntervalSet units = intersect(remaining, h.item->units);
          if (units.empty()) continue;
          remaining = subtract(remaining, units);
          out.push_back({h.rank, static_cast<int>(r), h.item->chunk, h.item->block, need.chunk,
                         need.block, need.param, std::move(units)});
        }
      }
      if (!remaining.empty()) return false;
    }
  }
  return true;
}

}  // namespace ntp::train::testing
