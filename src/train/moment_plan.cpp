#include "train/moment_plan.h"

#include <algorithm>
#include <limits>

namespace ntp::train {
namespace {

struct Holding {
  int rank = 0;
  const MomentItem* item = nullptr;
};

// The holdings of one parameter, and their intervals sorted by first unit with a running
// maximum of their ends, so that the intervals overlapping [begin, end) are found by a binary
// search and a walk over the overlapping ones (and the few that start before `end` without
// reaching `begin`).
class HoldingIndex {
 public:
  void add(int rank, const MomentItem* item) {
    const auto h = static_cast<int>(holdings_.size());
    holdings_.push_back({rank, item});
    for (const shard::Interval& i : item->units.intervals())
      entries_.push_back({i.begin, i.end, h});
  }

  void seal() {
    std::sort(entries_.begin(), entries_.end(),
              [](const Entry& a, const Entry& b) { return a.begin < b.begin; });
    reach_.resize(entries_.size());
    std::int64_t reach = std::numeric_limits<std::int64_t>::min();
    for (std::size_t k = 0; k < entries_.size(); ++k)
      reach_[k] = reach = std::max(reach, entries_[k].end);
  }

  // The holdings whose units overlap `units`, in the order they were added.
  std::vector<Holding> overlapping(const shard::IntervalSet& units) const {
    std::vector<int> found;
    for (const shard::Interval& want : units.intervals()) {
      // reach_ is non-decreasing: the first entry that could reach past want.begin.
      auto k = static_cast<std::size_t>(std::upper_bound(reach_.begin(), reach_.end(), want.begin) -
                                        reach_.begin());
      for (; k < entries_.size() && entries_[k].begin < want.end; ++k) {
        if (entries_[k].end > want.begin) found.push_back(entries_[k].holding);
      }
    }
    std::sort(found.begin(), found.end());
    found.erase(std::unique(found.begin(), found.end()), found.end());
    std::vector<Holding> out;
    out.reserve(found.size());
    for (int h : found) out.push_back(holdings_[static_cast<std::size_t>(h)]);
    return out;
  }

 private:
  struct Entry {
    std::int64_t begin = 0, end = 0;
    int holding = 0;
  };
  std::vector<Holding> holdings_;  // in world-rank order, then description order
  std::vector<Entry> entries_;
  std::vector<std::int64_t> reach_;  // [k]: the greatest end among entries_[0..k]
};

// Appends the transfers of `need` (a block member `destination` needs) from `holders` (those
// whose units overlap it, in world-rank order); returns the units no member holds.
shard::IntervalSet take_sources(const MomentItem& need, int destination,
                                const std::vector<Holding>& holders,
                                std::vector<MomentTransfer>& out) {
  shard::IntervalSet remaining = need.units;
  auto take = [&](bool self, std::int64_t kind) {
    for (const Holding& h : holders) {
      if (remaining.empty()) return;
      if ((h.rank == destination) != self || h.item->kind != kind) continue;
      shard::IntervalSet units = intersect(remaining, h.item->units);
      if (units.empty()) continue;
      remaining = subtract(remaining, units);
      out.push_back({h.rank, destination, h.item->chunk, h.item->block, need.chunk, need.block,
                     need.param, std::move(units)});
    }
  };
  take(true, MomentItem::kOwned);
  take(true, MomentItem::kCopy);
  take(false, MomentItem::kOwned);
  take(false, MomentItem::kCopy);
  return remaining;
}

}  // namespace

Result<std::vector<MomentTransfer>> plan_moment_transfers(
    const std::vector<std::vector<MomentItem>>& items, const std::vector<std::string>& names) {
  std::vector<HoldingIndex> index(names.size());  // [param]
  for (std::size_t r = 0; r < items.size(); ++r) {
    for (const MomentItem& item : items[r]) {
      if (item.param < 0 || static_cast<std::size_t>(item.param) >= names.size()) {
        return invalid_argument("moment reshard: rank " + std::to_string(r) +
                                " describes parameter " + std::to_string(item.param) + " of " +
                                std::to_string(names.size()));
      }
      if (item.kind != MomentItem::kNeeded) {
        index[static_cast<std::size_t>(item.param)].add(static_cast<int>(r), &item);
      }
    }
  }
  for (HoldingIndex& i : index) i.seal();
  std::vector<MomentTransfer> transfers;
  for (std::size_t r = 0; r < items.size(); ++r) {
    for (const MomentItem& need : items[r]) {
      if (need.kind != MomentItem::kNeeded) continue;
      const HoldingIndex& holders = index[static_cast<std::size_t>(need.param)];
      const shard::IntervalSet lost =
          take_sources(need, static_cast<int>(r), holders.overlapping(need.units), transfers);
      if (!lost.empty()) {
        return not_found("no live member holds the ZeRO-1 moments of " +
                         names[static_cast<std::size_t>(need.param)] + " units " +
                         lost.to_string() +
                         " (their owner and the DP peer with their copy were both lost)");
      }
    }
  }
  return transfers;
}

}  // namespace ntp::train
