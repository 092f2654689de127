#include "shard/interval_set.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <iterator>
#include <set>

#include "core/rng.h"

namespace ntp::shard {
namespace {

std::set<std::int64_t> random_ids(Rng& rng, int universe) {
  std::set<std::int64_t> ids;
  const int n = static_cast<int>(rng.below(static_cast<std::uint64_t>(universe)));
  for (int i = 0; i < n; ++i) ids.insert(static_cast<std::int64_t>(rng.below(universe)));
  return ids;
}

std::set<std::int64_t> as_set(const IntervalSet& s) {
  auto ids = s.ids();
  return {ids.begin(), ids.end()};
}

TEST(IntervalSet, AppendMergesAdjacentRanges) {
  IntervalSet s;
  s.append(0, 3);
  s.append(3, 5);
  s.append(7, 7);  // empty: ignored
  s.append(8, 9);
  ASSERT_EQ(s.intervals().size(), 2u);
  EXPECT_EQ(s.count(), 6);
  EXPECT_EQ(s.to_string(), "0-4,8");
  EXPECT_TRUE(s.contains(4));
  EXPECT_FALSE(s.contains(5));
  EXPECT_EQ(IntervalSet().to_string(), "-");
}

TEST(IntervalSet, SetOperationsMatchStdSet) {
  Rng rng(1);
  for (int trial = 0; trial < 500; ++trial) {
    const int universe = 1 + static_cast<int>(rng.below(60));
    const auto a = random_ids(rng, universe), b = random_ids(rng, universe);
    const IntervalSet sa = IntervalSet::from_ids({a.begin(), a.end()});
    const IntervalSet sb = IntervalSet::from_ids({b.begin(), b.end()});
    std::set<std::int64_t> want_i, want_s, want_u;
    std::set_intersection(a.begin(), a.end(), b.begin(), b.end(),
                          std::inserter(want_i, want_i.end()));
    std::set_difference(a.begin(), a.end(), b.begin(), b.end(),
                        std::inserter(want_s, want_s.end()));
    std::set_union(a.begin(), a.end(), b.begin(), b.end(), std::inserter(want_u, want_u.end()));
    EXPECT_EQ(as_set(sa), a);
    EXPECT_EQ(as_set(intersect(sa, sb)), want_i);
    EXPECT_EQ(intersection_count(sa, sb), static_cast<std::int64_t>(want_i.size()));
    EXPECT_EQ(as_set(subtract(sa, sb)), want_s);
    EXPECT_EQ(as_set(unite(sa, sb)), want_u);
    // Canonical form: building the union from ids gives the identical interval list.
    EXPECT_EQ(unite(sa, sb), IntervalSet::from_ids({want_u.begin(), want_u.end()}));
    for (std::int64_t id = 0; id < universe; ++id) EXPECT_EQ(sa.contains(id), a.contains(id));
  }
}

}  // namespace
}  // namespace ntp::shard
