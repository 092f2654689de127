// The derived space's moves (train/state_reshard.h derived_transfers): a replica that comes back
// holding nothing receives each KV group once, from the holders of the nearest domain, spread over
// all of them rather than taken from the first. Replicated tensors (replicated_sources): a repair
// gets them in shares from the survivors of its own domain, a returning replica from those of
// the next domain; the shares cover every row once.
#include "train/state_reshard.h"

#include <gtest/gtest.h>

#include <map>

#include "shard/fold_sync_strategy.h"
#include "shard/unit_space.h"
#include "train/worker_role.h"

namespace ntp::train {
namespace {

// 2 domains x TP 4 of a grouped-query model: 8 query heads in `kv_heads` KV groups.
shard::ClusterSpec grouped_query(int kv_heads) {
  const shard::ModelShape shape{.heads = 8,
                                .hidden = 64,
                                .ffn = 96,
                                .ffn_block = 4,
                                .vocab = 100,
                                .layers = 2,
                                .kv_heads = kv_heads,
                                .head_dim = 12};
  shard::ClusterSpec spec;
  spec.domains = 2;
  spec.domain_size = 4;
  spec.spaces = shard::model_unit_spaces(shape);
  return spec;
}

TEST(DerivedTransfers, AReturningReplicasKvGroupsComeFromEveryHolder) {
  shard::ClusterSpec left = grouped_query(2);
  left.left = {1};  // domain 1 out of the job: its slots hold nothing
  const shard::ClusterSpec whole = grouped_query(2);
  const auto from = shard::plan_cluster(left, shard::FoldSyncStrategy());
  const auto to = shard::plan_cluster(whole, shard::FoldSyncStrategy());
  ASSERT_TRUE(from.ok() && to.ok());
  const int kv = 3;  // heads, ffn, vocab, kv, head_rows
  ASSERT_TRUE(to->spec.spaces[kv].derived());

  const std::vector<shard::ShardTransfer> moves = derived_transfers(*from, *to, active_slots(*to));
  // Domain 1's four slots each want one KV group (heads 2s, 2s+1 -> group s / 2); domain 0 holds
  // group 0 on slots 0 and 1 and group 1 on slots 2 and 3.
  std::map<int, int> sent_by;  // domain 0 slot -> groups it sends
  int received = 0;
  for (const shard::ShardTransfer& t : moves) {
    ASSERT_EQ(t.space, kv);
    ASSERT_EQ(t.source.domain, 0);
    ASSERT_EQ(t.destination.domain, 1);
    const int64_t group = t.destination.slot / 2;
    EXPECT_EQ(t.units.ids(), std::vector<int64_t>{group});
    EXPECT_EQ(t.source.slot / 2, group);  // a holder of that group
    sent_by[t.source.slot] += static_cast<int>(t.units.count());
    received += static_cast<int>(t.units.count());
  }
  EXPECT_EQ(received, 4);  // each slot of domain 1 its one group, once
  // Spread: each of the four holders sends one (the first holder of each group used to send both).
  EXPECT_EQ(sent_by, (std::map<int, int>{{0, 1}, {1, 1}, {2, 1}, {3, 1}}));
}

// The rows of a replicated tensor of `rows` rows, each once and in order, from `sources`.
std::vector<int64_t> rows_covered(
    const std::vector<std::pair<shard::SlotRef, shard::IntervalSet>>& sources) {
  std::vector<int64_t> out;
  for (const auto& [source, rows] : sources) {
    for (int64_t r : rows.ids()) out.push_back(r);
  }
  return out;
}

TEST(ReplicatedSources, ARepairGetsSharesFromEverySurvivorOfItsDomain) {
  shard::ClusterSpec spec = grouped_query(2);
  spec.failed = {{1, 2}};  // slot 1:2 died; its repair comes back holding nothing
  const auto from = shard::plan_cluster(spec, shard::FoldSyncStrategy());
  const auto to = shard::plan_cluster(grouped_query(2), shard::FoldSyncStrategy());
  ASSERT_TRUE(from.ok() && to.ok());
  const auto sources = replicated_sources(*from, active_slots(*to), {1, 2}, 10);
  // 10 rows over domain 1's three survivors: 4, 3, 3 in slot order.
  ASSERT_EQ(sources.size(), 3u);
  const std::vector<int> slots{0, 1, 3};
  const std::vector<int64_t> counts{4, 3, 3};
  for (size_t k = 0; k < sources.size(); ++k) {
    EXPECT_EQ(sources[k].first.domain, 1);
    EXPECT_EQ(sources[k].first.slot, slots[k]);
    EXPECT_EQ(sources[k].second.count(), counts[k]);
  }
  std::vector<int64_t> all(10);
  for (int64_t r = 0; r < 10; ++r) all[static_cast<size_t>(r)] = r;
  EXPECT_EQ(rows_covered(sources), all);
  // Fewer rows than survivors: one row each from the first, no empty share.
  EXPECT_EQ(rows_covered(replicated_sources(*from, active_slots(*to), {1, 2}, 2)),
            (std::vector<int64_t>{0, 1}));
  EXPECT_EQ(replicated_sources(*from, active_slots(*to), {1, 2}, 2).size(), 2u);
}

TEST(ReplicatedSources, AReturningReplicaGetsSharesFromTheNextDomain) {
  shard::ClusterSpec left = grouped_query(2);
  left.left = {1};
  const auto from = shard::plan_cluster(left, shard::FoldSyncStrategy());
  const auto to = shard::plan_cluster(grouped_query(2), shard::FoldSyncStrategy());
  ASSERT_TRUE(from.ok() && to.ok());
  for (int slot = 0; slot < 4; ++slot) {
    const auto sources = replicated_sources(*from, active_slots(*to), {1, slot}, 8);
    ASSERT_EQ(sources.size(), 4u) << slot;
    for (size_t k = 0; k < 4; ++k) {
      EXPECT_EQ(sources[k].first.domain, 0);
      EXPECT_EQ(sources[k].first.slot, static_cast<int>(k));
      EXPECT_EQ(sources[k].second.count(), 2);
    }
    EXPECT_EQ(rows_covered(sources), (std::vector<int64_t>{0, 1, 2, 3, 4, 5, 6, 7}));
  }
}

}  // namespace
}  // namespace ntp::train
