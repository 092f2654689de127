// IntervalSet: a set of unit ids stored as sorted, disjoint, non-adjacent half-open intervals.
//
// Layouts hand out units in a few contiguous runs, so a rank's 65,536 FFN columns are one or two
// intervals, not 65,536 ids: that keeps planning for 100,000 GPUs cheap.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace ntp::shard {

struct Interval {
  std::int64_t begin = 0;  // first unit id
  std::int64_t end = 0;    // one past the last unit id
  std::int64_t size() const { return end - begin; }
  friend bool operator==(const Interval&, const Interval&) = default;
};

class IntervalSet {
 public:
  IntervalSet() = default;
  // The set {begin, ..., end - 1}; empty when begin >= end.
  static IntervalSet range(std::int64_t begin, std::int64_t end);
  // The set of the given ids, in any order, duplicates allowed.
  static IntervalSet from_ids(std::vector<std::int64_t> ids);

  // Appends [begin, end); requires begin >= the current maximum end (ids arrive in increasing
  // order). Merges with the last interval when adjacent. Empty ranges are ignored.
  void append(std::int64_t begin, std::int64_t end);
  void append(const IntervalSet& later);

  const std::vector<Interval>& intervals() const { return intervals_; }
  bool empty() const { return intervals_.empty(); }
  std::int64_t count() const;  // number of ids
  bool contains(std::int64_t id) const;
  std::vector<std::int64_t> ids() const;
  // "0-3,7,9-11" (inclusive ranges), "-" when empty.
  std::string to_string() const;

  friend IntervalSet intersect(const IntervalSet& a, const IntervalSet& b);
  friend IntervalSet subtract(const IntervalSet& a, const IntervalSet& b);
  friend IntervalSet unite(const IntervalSet& a, const IntervalSet& b);
  // |a intersect b| without building the set.
  friend std::int64_t intersection_count(const IntervalSet& a, const IntervalSet& b);
  friend bool operator==(const IntervalSet&, const IntervalSet&) = default;

 private:
  std::vector<Interval> intervals_;
};

// `pool`'s ids in increasing order, dealt into consecutive runs of counts[0], counts[1], ... ids
// (the layouts' "deal the leftovers in order"); requires sum(counts) <= pool.count().
std::vector<IntervalSet> deal_in_order(const IntervalSet& pool,
                                       std::span<const std::int64_t> counts);

}  // namespace ntp::shard
