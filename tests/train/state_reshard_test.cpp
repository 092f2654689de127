// The derived space's moves (train/state_reshard.h derived_transfers): a replica that comes back
// holding nothing receives each KV group once, from the holders of the nearest domain, spread over
// all of them rather than taken from the first.
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

}  // namespace
}  // namespace ntp::train
