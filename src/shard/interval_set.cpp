#include "shard/interval_set.h"

#include <algorithm>

#include "core/check.h"

namespace ntp::shard {

IntervalSet IntervalSet::range(std::int64_t begin, std::int64_t end) {
  IntervalSet s;
  s.append(begin, end);
  return s;
}

IntervalSet IntervalSet::from_ids(std::vector<std::int64_t> ids) {
  std::sort(ids.begin(), ids.end());
  ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
  IntervalSet s;
  for (std::int64_t id : ids) s.append(id, id + 1);
  return s;
}

void IntervalSet::append(std::int64_t begin, std::int64_t end) {
  if (begin >= end) return;
  if (!intervals_.empty()) {
    Interval& last = intervals_.back();
    NTP_CHECK_MSG(begin >= last.end, "IntervalSet::append needs increasing, disjoint ranges");
    if (begin == last.end) {
      last.end = end;
      return;
    }
  }
  intervals_.push_back({begin, end});
}

void IntervalSet::append(const IntervalSet& later) {
  for (const Interval& i : later.intervals_) append(i.begin, i.end);
}

std::int64_t IntervalSet::count() const {
  std::int64_t n = 0;
  for (const Interval& i : intervals_) n += i.size();
  return n;
}

bool IntervalSet::contains(std::int64_t id) const {
  auto it = std::upper_bound(intervals_.begin(), intervals_.end(), id,
                             [](std::int64_t v, const Interval& i) { return v < i.end; });
  return it != intervals_.end() && it->begin <= id;
}

std::vector<std::int64_t> IntervalSet::ids() const {
  std::vector<std::int64_t> out;
  out.reserve(static_cast<std::size_t>(count()));
  for (const Interval& i : intervals_) {
    for (std::int64_t id = i.begin; id < i.end; ++id) out.push_back(id);
  }
  return out;
}

std::string IntervalSet::to_string() const {
  if (intervals_.empty()) return "-";
  std::string out;
  for (const Interval& i : intervals_) {
    if (!out.empty()) out += ',';
    out += std::to_string(i.begin);
    if (i.size() > 1) out += '-' + std::to_string(i.end - 1);
  }
  return out;
}

IntervalSet intersect(const IntervalSet& a, const IntervalSet& b) {
  IntervalSet out;
  auto i = a.intervals_.begin(), j = b.intervals_.begin();
  while (i != a.intervals_.end() && j != b.intervals_.end()) {
    out.append(std::max(i->begin, j->begin), std::min(i->end, j->end));
    (i->end < j->end) ? ++i : ++j;
  }
  return out;
}

std::int64_t intersection_count(const IntervalSet& a, const IntervalSet& b) {
  std::int64_t n = 0;
  auto i = a.intervals_.begin(), j = b.intervals_.begin();
  while (i != a.intervals_.end() && j != b.intervals_.end()) {
    n += std::max<std::int64_t>(0, std::min(i->end, j->end) - std::max(i->begin, j->begin));
    (i->end < j->end) ? ++i : ++j;
  }
  return n;
}

IntervalSet subtract(const IntervalSet& a, const IntervalSet& b) {
  IntervalSet out;
  auto j = b.intervals_.begin();
  for (const Interval& i : a.intervals_) {
    std::int64_t cursor = i.begin;
    while (j != b.intervals_.end() && j->end <= cursor) ++j;
    for (auto k = j; k != b.intervals_.end() && k->begin < i.end; ++k) {
      out.append(cursor, std::min(k->begin, i.end));
      cursor = std::max(cursor, k->end);
    }
    out.append(cursor, i.end);
  }
  return out;
}

IntervalSet unite(const IntervalSet& a, const IntervalSet& b) {
  std::vector<Interval> all;
  all.reserve(a.intervals_.size() + b.intervals_.size());
  std::merge(a.intervals_.begin(), a.intervals_.end(), b.intervals_.begin(), b.intervals_.end(),
             std::back_inserter(all),
             [](const Interval& x, const Interval& y) { return x.begin < y.begin; });
  IntervalSet out;
  for (const Interval& i : all) {
    if (!out.intervals_.empty() && i.begin <= out.intervals_.back().end) {
      out.intervals_.back().end = std::max(out.intervals_.back().end, i.end);
    } else {
      out.intervals_.push_back(i);
    }
  }
  return out;
}

std::vector<IntervalSet> deal_in_order(const IntervalSet& pool,
                                       std::span<const std::int64_t> counts) {
  std::vector<IntervalSet> out(counts.size());
  auto next = pool.intervals().begin();
  std::int64_t cursor = pool.empty() ? 0 : next->begin;
  for (std::size_t k = 0; k < counts.size(); ++k) {
    for (std::int64_t need = counts[k]; need > 0;) {
      NTP_CHECK(next != pool.intervals().end());
      const std::int64_t take = std::min(need, next->end - cursor);
      out[k].append(cursor, cursor + take);
      cursor += take;
      need -= take;
      if (cursor == next->end && ++next != pool.intervals().end()) cursor = next->begin;
    }
  }
  return out;
}

}  // namespace ntp::shard
