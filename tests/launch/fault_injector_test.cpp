#include "launch/fault_injector.h"

#include <gtest/gtest.h>

#include <cmath>

namespace ntp::launch {
namespace {

std::vector<Slot> running_slots(int n) {
  std::vector<Slot> slots(static_cast<std::size_t>(n));
  for (int r = 0; r < n; ++r) {
    slots[static_cast<std::size_t>(r)].id.rank = r;
    slots[static_cast<std::size_t>(r)].state = SlotState::kRunning;
  }
  return slots;
}

// The chaos kills and hangs of the launcher before slowdowns and stalls existed, for `ticks`
// calls of `dt` seconds: (tick, rank, kind) of each.
struct Draw {
  int tick;
  int rank;
  FaultKind kind;
  bool operator==(const Draw&) const = default;
};

std::vector<Draw> old_kill_hang_draws(std::uint64_t seed, int node, double rate, double dt,
                                      int ticks, int workers) {
  std::vector<Slot> slots = running_slots(workers);
  Rng rng = Rng(seed).fork(static_cast<std::uint64_t>(node));
  std::vector<Draw> out;
  for (int t = 0; t < ticks; ++t) {
    const double p = 1.0 - std::exp(-rate * dt);
    if (rng.uniform() >= p) continue;
    std::vector<Slot*> live;
    for (Slot& s : slots) {
      if (s.state == SlotState::kRunning) live.push_back(&s);
    }
    if (live.size() < 2) continue;
    Slot* victim = live[rng.below(live.size())];
    const FaultKind kind = rng.below(2) == 0 ? FaultKind::kKill : FaultKind::kHang;
    out.push_back(Draw{t, victim->id.rank, kind});
    victim->state = kind == FaultKind::kKill ? SlotState::kDone : SlotState::kHung;
  }
  return out;
}

TEST(FaultInjectorTest, ChaosKillsAndHangsAreTheDrawsOfBefore) {
  for (std::uint64_t seed : {1ULL, 7ULL, 11ULL}) {
    const double rate = 4.0;
    const double dt = 0.01;
    const std::vector<Draw> want = old_kill_hang_draws(seed, 0, rate, dt, 300, 4);
    std::vector<Slot> slots = running_slots(4);
    FaultInjector injector({}, ChaosSpec{seed, rate}, 0, 4);
    std::vector<Draw> got;
    int slowdowns = 0;
    for (int t = 0; t < 300; ++t) {
      for (const Injection& i : injector.due(slots, t * dt, dt)) {
        if (i.fault.kind == FaultKind::kSlow) {
          slowdowns += i.ends ? 0 : 1;
          continue;  // a slowdown leaves the worker running
        }
        got.push_back(Draw{t, i.fault.rank, i.fault.kind});
        slots[static_cast<std::size_t>(i.fault.rank)].state =
            i.fault.kind == FaultKind::kKill ? SlotState::kDone : SlotState::kHung;
      }
    }
    EXPECT_EQ(got, want) << "seed " << seed;
    EXPECT_FALSE(want.empty());
    EXPECT_GE(slowdowns, 1) << "seed " << seed;
  }
}

TEST(FaultInjectorTest, AStallIsPassedToTheWorkerAndFiresAtItsStep) {
  FaultSpec stall;
  stall.kind = FaultKind::kStall;
  stall.rank = 1;
  stall.step = 5;
  FaultInjector injector({stall}, std::nullopt, 0, 2);
  EXPECT_FALSE(injector.stall_step(0).has_value());
  EXPECT_EQ(injector.stall_step(1), 5);
  EXPECT_TRUE(injector.needs_steps());
  std::vector<Slot> slots = running_slots(2);
  slots[1].step = 4;
  EXPECT_TRUE(injector.due(slots, 1.0, 0.01).empty());
  slots[1].step = 5;
  const std::vector<Injection> due = injector.due(slots, 1.1, 0.01);
  ASSERT_EQ(due.size(), 1U);
  EXPECT_EQ(due[0].fault.kind, FaultKind::kStall);
  EXPECT_EQ(due[0].why, "at step 5");
  // Once: a later worker of the slot is not stalled again.
  EXPECT_FALSE(injector.stall_step(1).has_value());
  EXPECT_FALSE(injector.needs_steps());
}

TEST(FaultInjectorTest, ASlowdownEndsAtItsUntilStep) {
  FaultSpec slow;
  slow.kind = FaultKind::kSlow;
  slow.rank = 0;
  slow.factor = 0.5;
  slow.step = 3;
  slow.until = 8;
  FaultInjector injector({slow}, std::nullopt, 0, 1);
  std::vector<Slot> slots = running_slots(1);
  slots[0].step = 3;
  std::vector<Injection> due = injector.due(slots, 0.5, 0.01);
  ASSERT_EQ(due.size(), 1U);
  EXPECT_FALSE(due[0].ends);
  EXPECT_TRUE(injector.needs_steps()) << "the end waits for a step";
  slots[0].step = 7;
  EXPECT_TRUE(injector.due(slots, 0.6, 0.01).empty());
  slots[0].step = 8;
  due = injector.due(slots, 0.7, 0.01);
  ASSERT_EQ(due.size(), 1U);
  EXPECT_TRUE(due[0].ends);
  EXPECT_EQ(due[0].why, "at step 8");
  EXPECT_FALSE(injector.needs_steps());
}

}  // namespace
}  // namespace ntp::launch
