// The recovery protocol's pure rules (elastic/member_list.h), case by case: the decider's wait and
// its base, the agreed step, catching up over failed epochs, fencing, and what a member re-forms
// from.
#include "elastic/member_list.h"

#include <gtest/gtest.h>

namespace ntp::elastic {
namespace {

MemberList list_of(int epoch, std::vector<int> members, int base_epoch,
                   std::vector<int> base_members) {
  MemberList l;
  l.epoch = epoch;
  l.members = std::move(members);
  l.holders = l.members;
  l.base_epoch = base_epoch;
  l.base_members = std::move(base_members);
  l.base_layout = "layout-of-" + std::to_string(base_epoch);
  l.restarts.assign(8, 0);
  return l;
}

TEST(MemberListTest, EncodingRoundTrips) {
  MemberList l = list_of(3, {0, 2, 5}, 1, {0, 1, 2, 5});
  l.step = 17;
  Result<MemberList> back = decode_member_list(encode(l));
  ASSERT_TRUE(back.ok()) << back.status().message();
  EXPECT_EQ(encode(*back), encode(l));
  EXPECT_FALSE(decode_member_list("{").ok());
  Result<Announcement> a = decode_announcement(encode(Announcement{9, 2}));
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->committed, 9);
  EXPECT_EQ(a->restart, 2);
}

TEST(MemberListTest, TheDeciderWaitsForEveryCandidateUntilItAnnouncesOrIsGone) {
  const MemberList last = list_of(2, {0, 1, 2, 3}, 2, {0, 1, 2, 3});
  DecisionInput in;
  in.epoch = 3;
  in.last = &last;
  in.last_complete = true;
  in.last_layout = "layout-of-2";
  in.expected = last.members;
  in.announced = {{0, {10, 0}}, {1, {11, 0}}, {3, {10, 0}}};
  in.gone = [](int) { return false; };
  EXPECT_FALSE(decide(in).has_value());  // 2 neither announced nor is gone
  in.gone = [](int id) { return id == 2; };
  std::optional<MemberList> out = decide(in);
  ASSERT_TRUE(out.has_value());
  EXPECT_EQ(out->members, (std::vector<int>{0, 1, 3}));
  EXPECT_EQ(out->holders, (std::vector<int>{0, 1, 3}));
  EXPECT_EQ(out->step, 10);  // the least a holder applied: 1 takes its update back
  EXPECT_EQ(out->base_epoch, 2);
  EXPECT_EQ(out->base_layout, "layout-of-2");
  in.gone = [](int) { return false; };
  in.window_over = true;  // a silent candidate is left out once the window is over
  EXPECT_EQ(decide(in)->members, (std::vector<int>{0, 1, 3}));
}

TEST(MemberListTest, AnIncompleteEpochIsNoBase) {
  // Epoch 4 (from base 2) did not complete everywhere: epoch 5 starts from 2 again, and a member
  // of 4 that was not of 2 (a joiner of 4) holds nothing of it.
  const MemberList last = list_of(4, {0, 1, 6}, 2, {0, 1, 2});
  DecisionInput in;
  in.epoch = 5;
  in.last = &last;
  in.last_complete = false;
  in.expected = last.members;
  in.announced = {{0, {8, 0}}, {1, {8, 0}}, {6, {0, 1}}};
  in.gone = [](int) { return false; };
  std::optional<MemberList> out = decide(in);
  ASSERT_TRUE(out.has_value());
  EXPECT_EQ(out->base_epoch, 2);
  EXPECT_EQ(out->base_layout, "layout-of-2");
  EXPECT_EQ(out->holders, (std::vector<int>{0, 1}));
  EXPECT_EQ(out->step, 8);  // the joiner's announcement does not count
  EXPECT_EQ(out->restarts[6], 1);
}

TEST(MemberListTest, NextTargetSkipsFailedEpochsAndFencesOnAListWithoutIt) {
  std::map<int, EpochView> store;
  auto view = [&store](int e) { return store.count(e) ? store.at(e) : EpochView{}; };
  int newest = 0;
  EXPECT_EQ(next_target(3, view, &newest), 4);
  EXPECT_EQ(newest, 3);
  store[4] = EpochView{true, std::nullopt};  // 4 failed before a list: go on to 5
  store[5] = EpochView{true, true};          // 5 failed after a list naming us: adopt it
  EXPECT_EQ(next_target(3, view, &newest), 6);
  EXPECT_EQ(newest, 5);
  store[6] = EpochView{false, true};  // published and alive: follow it
  EXPECT_EQ(next_target(3, view, &newest), 6);
  store[6] = EpochView{false, false};  // published without us: fenced
  EXPECT_EQ(next_target(3, view, &newest), kFenced);
  EXPECT_EQ(newest, 6);
  store[6] = EpochView{false, false, true};  // published parking us: parked, not fenced
  EXPECT_EQ(next_target(3, view, &newest), kParked);
  EXPECT_EQ(newest, 6);
}

// Collected epochs (tombstones) are passed to the epoch that superseded them, whatever their
// fail keys say; a tombstone chain is followed to its end; the list found there decides.
TEST(MemberListTest, NextTargetFollowsTombstonesToTheEpochThatSupersededThem) {
  std::map<int, EpochView> store;
  auto view = [&store](int e) { return store.count(e) ? store.at(e) : EpochView{}; };
  int newest = 0;
  EpochView collected_by_6;
  collected_by_6.superseded_by = 6;
  for (int e = 4; e < 6; ++e) store[e] = collected_by_6;
  store[4].failed = true;
  store[6] = EpochView{false, false};  // listed without us: fenced there
  EXPECT_EQ(next_target(3, view, &newest), kFenced);
  EXPECT_EQ(newest, 6);
  store[6] = EpochView{true, true};  // listed with us, then failed: adopt it, go on to 7
  EXPECT_EQ(next_target(3, view, &newest), 7);
  EXPECT_EQ(newest, 6);
  EpochView collected_by_8;
  collected_by_8.superseded_by = 8;
  store[6] = store[7] = collected_by_8;  // 6 and 7 collected later: 4 -> 6 -> 8
  store[8] = EpochView{false, false, true};
  EXPECT_EQ(next_target(3, view, &newest), kParked);
  EXPECT_EQ(newest, 8);
}

TEST(MemberListTest, TombstonesRoundTripAndNoListIsOne) {
  EXPECT_EQ(decode_tombstone(encode_tombstone(17)), std::optional<int>(17));
  EXPECT_EQ(decode_tombstone(encode(initial_list({0, 1}, 2))), std::nullopt);
  for (const char* bad : {"superseded ", "superseded 0", "superseded -3", "superseded 4x", ""}) {
    EXPECT_EQ(decode_tombstone(bad), std::nullopt) << bad;
  }
}

// Ids are domain * 4 + slot; domains 0, 1, 2 keep 3, 2 and 3 candidates. With --min-tp 3, domain 1
// is parked (its replica leaves the job): its candidates neither listed nor holders, their
// committed steps not counted. With --min-tp 4 every domain is short: parking everyone publishes
// the list whole (the job then stops: no replica could run).
TEST(MemberListTest, TheCandidatesOfADomainBelowMinTpAreParked) {
  const MemberList last =
      list_of(2, {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11}, 2, {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11});
  DecisionInput in;
  in.epoch = 3;
  in.last = &last;
  in.last_complete = true;
  in.expected = last.members;
  in.gone = [](int id) { return id == 3 || id == 6 || id == 7 || id == 11; };
  for (int id : last.members) {
    if (!in.gone(id)) in.announced[id] = {id == 5 ? 9 : 10, 0};  // 5 is a step behind
  }
  in.domain_size = 4;
  in.min_tp = 3;
  std::optional<MemberList> out = decide(in);
  ASSERT_TRUE(out.has_value());
  EXPECT_EQ(out->members, (std::vector<int>{0, 1, 2, 8, 9, 10}));
  EXPECT_EQ(out->holders, out->members);
  EXPECT_EQ(out->parked, (std::vector<int>{4, 5}));
  EXPECT_TRUE(out->parks(4) && !out->has(4));
  EXPECT_EQ(out->step, 10);  // parked 5's step does not hold the others back
  Result<MemberList> back = decode_member_list(encode(*out));
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(back->parked, out->parked);

  in.min_tp = 1;  // no parking below 1
  EXPECT_TRUE(decide(in)->parked.empty());
  in.min_tp = 4;  // every domain short: nobody parked, the list stays whole
  out = decide(in);
  EXPECT_TRUE(out->parked.empty());
  EXPECT_EQ(out->members.size(), 8u);
}

TEST(MemberListTest, AMemberReformsFromTheBaseItHolds) {
  MemberList list = list_of(5, {0, 1, 2}, 3, {0, 1, 2});
  list.step = 20;
  Result<ReformPlan> plan = plan_reform(list, 1, {3, -1}, 20, false);
  ASSERT_TRUE(plan.ok());
  EXPECT_EQ(plan->source_epoch, 3);
  EXPECT_FALSE(plan->roll_back);
  // Ahead by one with its last update kept: it takes it back.
  plan = plan_reform(list, 1, {3, -1}, 21, true);
  ASSERT_TRUE(plan.ok());
  EXPECT_TRUE(plan->roll_back);
  // It completed epoch 4 (incomplete elsewhere) and kept 3: it re-forms from the kept base.
  plan = plan_reform(list, 1, {4, 3}, 20, false);
  ASSERT_TRUE(plan.ok());
  EXPECT_EQ(plan->source_epoch, 3);
  EXPECT_EQ(after_reform(list, *plan).current, 5);
  EXPECT_EQ(after_reform(list, *plan).base, 3);
  // Contradictions are protocol bugs, not faults.
  EXPECT_FALSE(plan_reform(list, 1, {2, -1}, 20, false).ok());  // holds no state of 3
  EXPECT_FALSE(plan_reform(list, 1, {3, -1}, 21, false).ok());  // ahead without its update
  EXPECT_FALSE(plan_reform(list, 1, {3, -1}, 19, true).ok());   // behind the agreed step
  EXPECT_FALSE(plan_reform(list, 1, {4, 3}, 21, true).ok());    // ahead in a kept base
  // A joiner holds nothing and receives everything.
  MemberList with_joiner = list_of(5, {0, 1, 7}, 3, {0, 1, 2});
  with_joiner.holders = {0, 1};
  plan = plan_reform(with_joiner, 7, {-1, -1}, 0, false);
  ASSERT_TRUE(plan.ok());
  EXPECT_EQ(plan->source_epoch, -1);
}

}  // namespace
}  // namespace ntp::elastic
