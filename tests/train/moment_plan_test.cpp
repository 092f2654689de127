// The ZeRO-1 moment plan against the scan it replaced (every need against every holding of its
// parameter), on re-formations whose holdings overlap so that the order of sources matters.
#include "train/moment_plan.h"

#include <gtest/gtest.h>

#include <utility>
#include <vector>

#include "moment_cases.h"

namespace ntp::train {
namespace {

using testing::param_names;
using testing::plan_by_scan;
using testing::reshard_case;

TEST(MomentPlanTest, MatchesTheScanTransferForTransfer) {
  const std::pair<int, int> sizes[] = {{8, 8}, {16, 40}, {33, 20}, {64, 500}};  // members, units
  for (const auto& [members, units] : sizes) {
    for (std::uint64_t seed = 1; seed <= 5; ++seed) {
      const auto items = reshard_case(members, /*params=*/3, units, /*scrambled=*/true, seed);
      std::vector<MomentTransfer> expected;
      ASSERT_TRUE(plan_by_scan(items, 3, expected));
      Result<std::vector<MomentTransfer>> plan = plan_moment_transfers(items, param_names(3));
      ASSERT_TRUE(plan.ok()) << plan.status().to_string();
      EXPECT_EQ(*plan, expected) << members << " members, " << units << " units, seed " << seed;
    }
  }
}

TEST(MomentPlanTest, EveryNeededUnitArrivesExactlyOnceAndTheLostOwnersFromTheirCopies) {
  constexpr int kMembers = 16, kParams = 2, kUnits = 64;
  const auto items = reshard_case(kMembers, kParams, kUnits, /*scrambled=*/false, 0);
  Result<std::vector<MomentTransfer>> plan = plan_moment_transfers(items, param_names(kParams));
  ASSERT_TRUE(plan.ok()) << plan.status().to_string();
  std::vector<std::vector<int>> arrivals(kParams, std::vector<int>(kUnits, 0));
  for (const MomentTransfer& t : *plan) {
    for (std::int64_t u : t.units.ids()) ++arrivals[static_cast<std::size_t>(t.param)][u];
    // The lost member 8 owned units 32..35; survivor 8 (old member 9) holds their copy.
    const bool lost_units =
        t.units.intervals().front().begin >= 32 && t.units.intervals().back().end <= 36;
    if (lost_units && t.source != t.destination) {
      EXPECT_EQ(t.source, 8);
    }
  }
  for (const std::vector<int>& param : arrivals) {
    for (int count : param) EXPECT_EQ(count, 1);
  }
}

TEST(MomentPlanTest, UnitsHeldByNoMemberAreNamed) {
  std::vector<std::vector<MomentItem>> items(2);
  items[0].push_back({MomentItem::kOwned, 0, 0, 0, shard::IntervalSet::range(0, 4)});
  items[1].push_back({MomentItem::kNeeded, 0, 0, 0, shard::IntervalSet::range(2, 7)});
  Result<std::vector<MomentTransfer>> plan = plan_moment_transfers(items, {"wqkv"});
  ASSERT_EQ(plan.status().code(), StatusCode::kNotFound);
  EXPECT_NE(plan.status().message().find("wqkv units 4-6"), std::string::npos)
      << plan.status().message();
}

TEST(MomentPlanTest, AParameterOutOfRangeIsRefused) {
  std::vector<std::vector<MomentItem>> items(1);
  items[0].push_back({MomentItem::kOwned, 0, 0, 3, shard::IntervalSet::range(0, 4)});
  Result<std::vector<MomentTransfer>> plan = plan_moment_transfers(items, {"a", "b"});
  ASSERT_EQ(plan.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(plan.status().message().find("parameter 3 of 2"), std::string::npos)
      << plan.status().message();
}

}  // namespace
}  // namespace ntp::train
