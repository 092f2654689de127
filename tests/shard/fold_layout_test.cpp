#include <gtest/gtest.h>

#include <vector>

#include "core/rng.h"
#include "shard/balance.h"
#include "shard/fold_sync_strategy.h"

namespace ntp::shard {
namespace {

// Checks the fold layout of one replica against the definition in fold_sync_strategy.h.
void check_fold_layout(std::int64_t units, int degree, int sync_degree) {
  SCOPED_TRACE("units=" + std::to_string(units) + " degree=" + std::to_string(degree) +
               " sync=" + std::to_string(sync_degree));
  const std::vector<IntervalSet> layout = fold_layout(units, degree, sync_degree);
  ASSERT_EQ(layout.size(), static_cast<std::size_t>(degree));
  std::vector<int> owners(static_cast<std::size_t>(units), 0);
  std::int64_t lo = units, hi = 0;
  for (const IntervalSet& s : layout) {
    for (std::int64_t id : s.ids()) ++owners[static_cast<std::size_t>(id)];
    lo = std::min(lo, s.count());
    hi = std::max(hi, s.count());
  }
  for (int n : owners) ASSERT_EQ(n, 1) << "every unit owned exactly once";
  EXPECT_LE(hi - lo, 1) << "balanced";
  EXPECT_EQ(hi, max_units_per_rank(units, degree));
  for (int r = 0; r < sync_degree; ++r) {
    const IntervalSet partition = sync_partition(units, sync_degree, r);
    EXPECT_EQ(intersect(layout[static_cast<std::size_t>(r)], partition),
              layout[static_cast<std::size_t>(r)])
        << "core rank " << r << " owns only units of its sync partition";
  }
  if (degree == sync_degree) {
    for (int r = 0; r < degree; ++r) {
      EXPECT_EQ(layout[static_cast<std::size_t>(r)], sync_partition(units, sync_degree, r));
    }
  }
}

TEST(FoldLayout, ExhaustiveSmallCases) {
  for (std::int64_t units = 1; units <= 40; ++units) {
    for (int degree = 1; degree <= std::min<std::int64_t>(units, 20); ++degree) {
      for (int sync = 1; sync <= degree; ++sync) check_fold_layout(units, degree, sync);
    }
  }
}

TEST(FoldLayout, RandomLargeCases) {
  Rng rng(3);
  for (int trial = 0; trial < 300; ++trial) {
    const int degree = 1 + static_cast<int>(rng.below(128));
    const int sync = 1 + static_cast<int>(rng.below(static_cast<std::uint64_t>(degree)));
    const std::int64_t units = degree + static_cast<std::int64_t>(rng.below(70000));
    check_fold_layout(units, degree, sync);
  }
}

TEST(FoldLayout, MegatronExampleEightToSeven) {
  // 128 heads, healthy TP8 next to a TP7 replica: core ranks keep 16 heads of their 18-19 head
  // partition, the extra rank 7 collects the 16 tail heads.
  const auto layout = fold_layout(128, 8, 7);
  for (int r = 0; r < 8; ++r) EXPECT_EQ(layout[static_cast<std::size_t>(r)].count(), 16);
  EXPECT_EQ(layout[0].to_string(), "0-15");
  EXPECT_EQ(layout[1].to_string(), "19-34");
  EXPECT_EQ(layout[7].to_string(), "16-18,35-37,54-55,72-73,90-91,108-109,126-127");
}

}  // namespace
}  // namespace ntp::shard
