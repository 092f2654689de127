#include "shard/weighted_layout.h"

#include <algorithm>
#include <numeric>

#include "core/check.h"
#include "shard/weighted_balance.h"

namespace ntp::shard {
namespace {

// The `n` smallest ids of `set` (all of it when n >= |set|).
IntervalSet first_units(const IntervalSet& set, std::int64_t n) {
  IntervalSet out;
  for (const Interval& i : set.intervals()) {
    if (n <= 0) break;
    const std::int64_t take = std::min(n, i.size());
    out.append(i.begin, i.begin + take);
    n -= take;
  }
  return out;
}

}  // namespace

std::vector<IntervalSet> rebalance_units(const std::vector<IntervalSet>& base,
                                         std::span<const std::int64_t> counts, std::int64_t units) {
  NTP_CHECK(base.size() == counts.size());
  NTP_CHECK(std::accumulate(counts.begin(), counts.end(), std::int64_t{0}) == units);
  std::vector<IntervalSet> out(base.size());
  IntervalSet kept;
  for (std::size_t r = 0; r < base.size(); ++r) {
    out[r] = first_units(base[r], counts[r]);
    kept = unite(kept, out[r]);
  }
  const IntervalSet pool = subtract(IntervalSet::range(0, units), kept);
  std::vector<std::int64_t> need(base.size());
  for (std::size_t r = 0; r < base.size(); ++r) need[r] = counts[r] - out[r].count();
  const std::vector<IntervalSet> extra = deal_in_order(pool, need);
  for (std::size_t r = 0; r < base.size(); ++r) out[r] = unite(out[r], extra[r]);
  return out;
}

Result<RankUnits> weighted_units(const RankUnits& base, std::span<const double> speeds,
                                 const std::vector<UnitSpace>& spaces) {
  NTP_CHECK(base.size() == spaces.size());
  RankUnits out;
  out.reserve(base.size());
  for (std::size_t sp = 0; sp < base.size(); ++sp) {
    const std::vector<IntervalSet>& ranks = base[sp];
    NTP_CHECK(ranks.size() == speeds.size());
    if (spaces[sp].derived()) {  // follows its source space (plan_cluster derives it)
      out.push_back(ranks);
      continue;
    }
    // Ties go to the ranks base gave more units, then to lower ranks: with equal speeds the
    // counts are base's own.
    std::vector<int> priority(ranks.size());
    std::iota(priority.begin(), priority.end(), 0);
    std::stable_sort(priority.begin(), priority.end(), [&](int a, int b) {
      return ranks[static_cast<std::size_t>(a)].count() >
             ranks[static_cast<std::size_t>(b)].count();
    });
    NTP_ASSIGN_OR_RETURN(std::vector<std::int64_t> counts,
                         weighted_counts(spaces[sp].units, speeds, priority));
    out.push_back(rebalance_units(ranks, counts, spaces[sp].units));
  }
  return out;
}

}  // namespace ntp::shard
