#include "shard/reshard_plan.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <map>

#include "random_cluster.h"
#include "shard/fold_sync_strategy.h"

namespace ntp::shard {
namespace {

using testing::describe;

// What each slot holds: holdings[{domain, slot}][space].
using Holdings = std::map<SlotRef, std::vector<IntervalSet>>;

Holdings holdings_of(const ClusterLayout& layout) {
  Holdings h;
  for (const ReplicaLayout& r : layout.replicas) {
    for (int k = 0; k < r.degree(); ++k) {
      auto& mine = h[{r.domain, r.slots[static_cast<std::size_t>(k)]}];
      for (const auto& space : r.units) mine.push_back(space[static_cast<std::size_t>(k)]);
    }
  }
  return h;
}

// Applies `plan` to the old holdings: survivors keep what they had, receive the transfers, and drop
// what the new layout does not give them. Checks each transfer's source really held its units.
void check_plan_reaches_layout(const ClusterLayout& from, const ClusterLayout& to,
                               const ReshardPlan& plan) {
  SCOPED_TRACE("from " + describe(from.spec) + " to " + describe(to.spec));
  const Holdings before = holdings_of(from);
  const Holdings after = holdings_of(to);
  const std::size_t spaces = to.spec.spaces.size();
  Holdings got;
  for (const auto& [slot, units] : after) {
    auto it = before.find(slot);
    std::vector<IntervalSet> kept(spaces);
    if (it != before.end()) {
      for (std::size_t sp = 0; sp < spaces; ++sp) kept[sp] = intersect(it->second[sp], units[sp]);
    }
    got[slot] = kept;
  }
  std::int64_t intra = 0, peer = 0;
  for (const ShardTransfer& t : plan.transfers) {
    ASSERT_FALSE(t.units.empty());
    ASSERT_FALSE(to.spec.is_failed(t.source)) << "source must be alive";
    auto src = before.find(t.source);
    ASSERT_NE(src, before.end()) << "source must have been active";
    EXPECT_EQ(intersect(src->second[static_cast<std::size_t>(t.space)], t.units), t.units)
        << "source must hold what it sends";
    auto& dst = got.at(t.destination)[static_cast<std::size_t>(t.space)];
    EXPECT_EQ(intersection_count(dst, t.units), 0) << "a unit delivered twice";
    dst = unite(dst, t.units);
    EXPECT_EQ(t.bytes, t.units.count() *
                           to.spec.spaces[static_cast<std::size_t>(t.space)].params_per_unit *
                           to.spec.bytes.state_bytes);
    (t.intra_domain() ? intra : peer) += t.bytes;
    if (!t.intra_domain()) {
      // A DP peer is used only for units no live slot of the destination's domain held.
      for (const auto& [slot, units] : before) {
        if (slot.domain != t.destination.domain || to.spec.is_failed(slot)) continue;
        EXPECT_EQ(intersection_count(units[static_cast<std::size_t>(t.space)], t.units), 0)
            << "fetched from a DP peer what domain " << slot.domain << " still had";
      }
    }
  }
  EXPECT_EQ(intra, plan.intra_domain_bytes);
  EXPECT_EQ(peer, plan.dp_peer_bytes);
  EXPECT_EQ(got, after) << "applying the plan must give exactly the new layout";
}

// True when every unit of every space is held by some slot of `from` that is alive in `to`.
bool every_unit_has_a_live_copy(const ClusterLayout& from, const ClusterSpec& to) {
  for (std::size_t sp = 0; sp < to.spaces.size(); ++sp) {
    IntervalSet live;
    for (const auto& [slot, units] : holdings_of(from)) {
      if (!to.is_failed(slot)) live = unite(live, units[sp]);
    }
    if (live.count() != to.spaces[sp].units) return false;
  }
  return true;
}

// The fold layout of `spec`, and of `spec` with the slots `lost` failed, planned from the first as
// a re-formation plans it.
struct SlotLoss {
  ClusterLayout healthy;
  ClusterLayout failed;
};
Result<SlotLoss> lose_slots(const ClusterSpec& spec, std::vector<SlotRef> lost) {
  NTP_ASSIGN_OR_RETURN(ClusterLayout healthy, plan_cluster(spec, FoldSyncStrategy()));
  ClusterSpec failed_spec = spec;
  failed_spec.failed = std::move(lost);
  NTP_ASSIGN_OR_RETURN(ClusterLayout failed,
                       plan_cluster(failed_spec, FoldSyncStrategy(), &healthy));
  return SlotLoss{std::move(healthy), std::move(failed)};
}

TEST(ReshardPlan, FailureAndRepairTransitionsReachTheNewLayout) {
  Rng rng(4242);
  int lost = 0;
  for (int trial = 0; trial < 250; ++trial) {
    const ClusterSpec spec = testing::random_cluster_spec(rng);
    const auto strategies = testing::all_strategies(spec);
    const SyncStrategy& strategy = *strategies[trial % strategies.size()];
    SCOPED_TRACE(std::string(strategy.name()));
    auto healthy = plan_cluster(spec, strategy);
    ASSERT_TRUE(healthy.ok());
    const ClusterSpec failed_spec =
        testing::fail_more(spec, rng, 1 + static_cast<int>(rng.below(4)));
    auto failed = plan_cluster(failed_spec, strategy, &*healthy);
    ASSERT_TRUE(failed.ok()) << failed.status().to_string();
    auto on_failure = plan_reshard(*healthy, *failed);
    if (!every_unit_has_a_live_copy(*healthy, failed_spec)) {
      // Only possible with a single domain: then the plan must say a checkpoint is needed.
      ASSERT_FALSE(on_failure.ok());
      EXPECT_EQ(on_failure.status().code(), StatusCode::kNotFound);
      ++lost;
      continue;
    }
    ASSERT_TRUE(on_failure.ok()) << on_failure.status().to_string();
    check_plan_reaches_layout(*healthy, *failed, *on_failure);

    const ClusterSpec repaired_spec = testing::repair_some(failed_spec, rng, 2);
    auto repaired = plan_cluster(repaired_spec, strategy, &*failed);
    ASSERT_TRUE(repaired.ok());
    auto on_repair = plan_reshard(*failed, *repaired);
    ASSERT_TRUE(on_repair.ok()) << on_repair.status().to_string();
    check_plan_reaches_layout(*failed, *repaired, *on_repair);
    // A repaired slot held nothing, so a repair never needs a DP peer.
    EXPECT_EQ(on_repair->dp_peer_bytes, 0);
  }
  EXPECT_LT(lost, 50) << "most random cases must exercise a successful reshard";
}

// A replica leaving the job (below --min-tp) and coming back: the survivors reach their layout
// without any unit from the domain that left (its survivors sit out), and on its return every one
// of its units comes from DP peers (it held nothing while out).
TEST(ReshardPlan, AReplicaLeavesAndReturnsFedByItsDpPeers) {
  Rng rng(777);
  int cases = 0;
  for (int trial = 0; trial < 150; ++trial) {
    const ClusterSpec spec = testing::random_cluster_spec(rng);
    if (spec.domains < 2) continue;
    const auto strategies = testing::all_strategies(spec);
    const SyncStrategy& strategy = *strategies[trial % strategies.size()];
    SCOPED_TRACE(std::string(strategy.name()));
    auto healthy = plan_cluster(spec, strategy);
    ASSERT_TRUE(healthy.ok());
    ClusterSpec out_spec = spec;
    const int leaving = static_cast<int>(rng.below(static_cast<std::uint64_t>(spec.domains)));
    out_spec.left = {leaving};
    auto out = plan_cluster(out_spec, strategy, &*healthy);
    ASSERT_TRUE(out.ok()) << out.status().to_string();
    auto on_leave = plan_reshard(*healthy, *out);
    ASSERT_TRUE(on_leave.ok()) << on_leave.status().to_string();
    check_plan_reaches_layout(*healthy, *out, *on_leave);
    for (const ShardTransfer& t : on_leave->transfers) EXPECT_NE(t.source.domain, leaving);

    auto back = plan_cluster(spec, strategy, &*out);
    ASSERT_TRUE(back.ok());
    auto on_return = plan_reshard(*out, *back);
    ASSERT_TRUE(on_return.ok()) << on_return.status().to_string();
    check_plan_reaches_layout(*out, *back, *on_return);
    std::int64_t into_returning = 0, needed = 0;
    for (const ShardTransfer& t : on_return->transfers) {
      if (t.destination.domain != leaving) continue;
      EXPECT_NE(t.source.domain, leaving);
      into_returning += t.bytes;
    }
    for (const UnitSpace& space : spec.spaces) {
      needed += space.units * space.params_per_unit * spec.bytes.state_bytes;
    }
    EXPECT_EQ(into_returning, needed);  // the whole model, once, from its DP peers
    ++cases;
  }
  EXPECT_GT(cases, 50);
}

TEST(ReshardPlan, NoChangeMovesNothing) {
  Rng rng(5);
  for (int trial = 0; trial < 50; ++trial) {
    auto layout = plan_cluster(testing::random_cluster_spec(rng), FoldSyncStrategy());
    ASSERT_TRUE(layout.ok());
    auto again = plan_cluster(layout->spec, FoldSyncStrategy(), &*layout);
    auto plan = plan_reshard(*layout, *again);
    ASSERT_TRUE(plan.ok());
    EXPECT_TRUE(plan->transfers.empty());
  }
}

TEST(ReshardPlan, LostSlotIsRefilledFromADpPeerOnlyForItsOwnUnits) {
  // Two TP4 replicas of 8 heads; slot 0:1 dies. Domain 0 goes to TP3, and so does the sync degree,
  // so domain 1 re-lays out too, but only from its own slots.
  ClusterSpec spec;
  spec.domains = 2;
  spec.domain_size = 4;
  spec.spaces = {{"heads", 8, 10}};
  spec.bytes = {.grad_bytes = 4, .state_bytes = 1};
  auto loss = lose_slots(spec, {{0, 1}});
  ASSERT_TRUE(loss.ok()) << loss.status().to_string();
  auto plan = plan_reshard(loss->healthy, loss->failed);
  ASSERT_TRUE(plan.ok());
  // Heads 2-3 lived only on the dead slot in domain 0: exactly they come from domain 1.
  IntervalSet from_peer;
  for (const ShardTransfer& t : plan->transfers) {
    if (!t.intra_domain()) {
      EXPECT_EQ(t.source.domain, 1);
      from_peer = unite(from_peer, t.units);
    }
  }
  EXPECT_EQ(from_peer.to_string(), "2-3");
  EXPECT_EQ(plan->dp_peer_bytes, 2 * 10);
  check_plan_reaches_layout(loss->healthy, loss->failed, *plan);
}

// Bytes each DP peer domain sends over `plan` (index: domain), and the largest unit it sends.
std::vector<std::int64_t> peer_sends(const ClusterSpec& spec, const ReshardPlan& plan,
                                     std::int64_t* largest_unit) {
  std::vector<std::int64_t> sent(static_cast<std::size_t>(spec.domains), 0);
  *largest_unit = 0;
  for (const ShardTransfer& t : plan.transfers) {
    if (t.intra_domain()) continue;
    sent[static_cast<std::size_t>(t.source.domain)] += t.bytes;
    *largest_unit = std::max(*largest_unit, t.bytes / t.units.count());
  }
  return sent;
}

// Slots die in domain 0 only, so every other domain holds every lost unit: the lost units are
// split among all of them. Each lost unit arrives exactly once, and each peer's bytes are within
// one unit of the equal share: units are whole, and a peer's share is cut at two unit edges,
// each at most half a unit from the exact cut (the plan's midpoint rule).
TEST(ReshardPlan, LostUnitsAreSplitAmongEveryDpPeerBalancedByBytes) {
  Rng rng(2020);
  int cases = 0;
  for (int trial = 0; trial < 200; ++trial) {
    const ClusterSpec spec = testing::random_cluster_spec(rng);
    if (spec.domains < 2 || !spec.left.empty()) continue;
    const auto strategies = testing::all_strategies(spec);
    const SyncStrategy& strategy = *strategies[trial % strategies.size()];
    SCOPED_TRACE(std::string(strategy.name()) + " " + describe(spec));
    auto healthy = plan_cluster(spec, strategy);
    ASSERT_TRUE(healthy.ok());
    ClusterSpec failed_spec = spec;
    const int deaths = 1 + static_cast<int>(rng.below(3));
    for (int k = 0; k < deaths && failed_spec.degree(0) > failed_spec.min_tp; ++k) {
      const std::vector<int> alive = failed_spec.healthy_slots(0);
      failed_spec.failed.push_back({0, alive[rng.below(alive.size())]});
      std::sort(failed_spec.failed.begin(), failed_spec.failed.end());
    }
    if (failed_spec.failed == spec.failed) continue;
    auto failed = plan_cluster(failed_spec, strategy, &*healthy);
    ASSERT_TRUE(failed.ok()) << failed.status().to_string();
    auto plan = plan_reshard(*healthy, *failed);
    ASSERT_TRUE(plan.ok()) << plan.status().to_string();
    check_plan_reaches_layout(*healthy, *failed, *plan);

    // What the dead slots held, per space: exactly what comes from DP peers, each unit once.
    std::vector<std::map<std::int64_t, int>> received(spec.spaces.size());
    for (const ShardTransfer& t : plan->transfers) {
      if (t.intra_domain()) continue;
      for (std::int64_t u : t.units.ids()) ++received[static_cast<std::size_t>(t.space)][u];
    }
    const Holdings before = holdings_of(*healthy);
    for (std::size_t sp = 0; sp < spec.spaces.size(); ++sp) {
      IntervalSet lost;
      for (const auto& [slot, units] : before) {
        const bool died = slot.domain == 0 && failed_spec.is_failed(slot);
        if (died) lost = unite(lost, units[sp]);
      }
      EXPECT_EQ(static_cast<std::int64_t>(received[sp].size()), lost.count());
      for (std::int64_t u : lost.ids()) EXPECT_EQ(received[sp][u], 1) << "unit " << u;
    }
    std::int64_t largest = 0;
    const std::vector<std::int64_t> sent = peer_sends(spec, *plan, &largest);
    const auto peers = static_cast<std::int64_t>(spec.domains - 1);
    EXPECT_EQ(sent[0], 0);
    for (int d = 1; d < spec.domains; ++d) {
      // |sent - total / peers| <= one unit, times peers to stay in integers.
      EXPECT_LE(std::abs(peers * sent[static_cast<std::size_t>(d)] - plan->dp_peer_bytes),
                peers * largest)
          << "domain " << d << " sends " << sent[static_cast<std::size_t>(d)] << " of "
          << plan->dp_peer_bytes;
    }
    ++cases;
  }
  EXPECT_GT(cases, 50);
}

// Four TP4 replicas of 12 heads and 24 FFN units; slot 0:1 dies. Its 3 heads (10 bytes each) and
// 6 FFN units (5 bytes each), 60 bytes, have no copy in domain 0: laid end to end (heads first),
// cut at 20 and 40, the three peers send 20 bytes each (one peer two heads, one a head and two
// FFN units, one four FFN units).
TEST(ReshardPlan, ADeadSlotIsRefilledByEveryDpPeerInEqualShares) {
  ClusterSpec spec;
  spec.domains = 4;
  spec.domain_size = 4;
  spec.spaces = {{"heads", 12, 10}, {"ffn", 24, 5}};
  spec.bytes = {.grad_bytes = 4, .state_bytes = 1};
  auto loss = lose_slots(spec, {{0, 1}});
  ASSERT_TRUE(loss.ok()) << loss.status().to_string();
  auto plan = plan_reshard(loss->healthy, loss->failed);
  ASSERT_TRUE(plan.ok());
  check_plan_reaches_layout(loss->healthy, loss->failed, *plan);
  EXPECT_EQ(plan->dp_peer_bytes, 3 * 10 + 6 * 5);
  std::int64_t largest = 0;
  EXPECT_EQ(peer_sends(spec, *plan, &largest), (std::vector<std::int64_t>{0, 20, 20, 20}));
  EXPECT_EQ(largest, 10);
  // Deterministic: every member computing the plan gets the same transfers.
  auto again = plan_reshard(loss->healthy, loss->failed);
  ASSERT_TRUE(again.ok());
  ASSERT_EQ(again->transfers.size(), plan->transfers.size());
  for (std::size_t i = 0; i < plan->transfers.size(); ++i) {
    EXPECT_EQ(again->transfers[i].source, plan->transfers[i].source);
    EXPECT_EQ(again->transfers[i].destination, plan->transfers[i].destination);
    EXPECT_EQ(again->transfers[i].units, plan->transfers[i].units);
  }
}

TEST(ReshardPlan, KeepsMostUnitsInPlaceWhenAReplicaLosesASlot) {
  // NVL72 replica with 128 heads losing slot 40: the greedy slot mapping keeps the bulk of the
  // heads where they are; a naive rank shift would move about half of them.
  ClusterSpec spec;
  spec.domains = 2;
  spec.domain_size = 72;
  spec.spaces = {{"heads", 128, 1}};
  spec.bytes = {.grad_bytes = 1, .state_bytes = 1};
  auto loss = lose_slots(spec, {{0, 40}});
  ASSERT_TRUE(loss.ok()) << loss.status().to_string();
  auto plan = plan_reshard(loss->healthy, loss->failed);
  ASSERT_TRUE(plan.ok());
  EXPECT_GE(plan->kept_bytes, 2 * 128 * 3 / 4) << "kept " << plan->kept_bytes << " of 256 heads";
  check_plan_reaches_layout(loss->healthy, loss->failed, *plan);
}

TEST(ReshardPlan, UnitWithNoLiveCopyIsUnavailable) {
  ClusterSpec spec;
  spec.domains = 2;
  spec.domain_size = 2;
  spec.spaces = {{"heads", 2, 1}};
  auto loss = lose_slots(spec, {{0, 0}, {1, 0}});  // both copies of head 0 die at once
  ASSERT_TRUE(loss.ok()) << loss.status().to_string();
  auto plan = plan_reshard(loss->healthy, loss->failed);
  ASSERT_FALSE(plan.ok());
  EXPECT_EQ(plan.status().code(), StatusCode::kNotFound);
  EXPECT_NE(plan.status().message().find("checkpoint"), std::string::npos);
}

}  // namespace
}  // namespace ntp::shard
