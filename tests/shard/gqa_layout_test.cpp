// balance_query_heads: balanced by query heads, every head on one rank, each rank's KV groups the
// ones its heads read, and the fewest KV copies for the cap (checked against brute force over
// every assignment, contiguous or not, on small cases). Prints the duplication cost figures
// docs/model.md quotes.
#include <gtest/gtest.h>

#include <cstdio>
#include <set>

#include "shard/gqa_layout.h"

namespace ntp::shard {
namespace {

void expect_consistent(const GqaLayout& l, std::int64_t n_q, std::int64_t n_kv, int ranks) {
  ASSERT_EQ(static_cast<int>(l.ranks.size()), ranks);
  std::vector<int> seen(static_cast<size_t>(n_q), 0);
  std::int64_t copies = 0;
  for (const GqaRankShare& r : l.ranks) {
    std::set<std::int64_t> groups;
    for (std::int64_t h : r.q_heads) {
      ++seen[static_cast<size_t>(h)];
      groups.insert(h / (n_q / n_kv));
    }
    EXPECT_EQ(std::vector<std::int64_t>(groups.begin(), groups.end()), r.kv_groups);
    copies += static_cast<std::int64_t>(r.kv_groups.size());
  }
  for (int s : seen) EXPECT_EQ(s, 1);
  EXPECT_EQ(copies, l.kv_copies);
}

TEST(GqaLayoutTest, SixtyFourQueryHeadsInEightGroupsOverSevenRanks) {
  auto l = balance_query_heads(64, 8, 7);
  ASSERT_TRUE(l.ok());
  expect_consistent(*l, 64, 8, 7);
  EXPECT_LE(l->heads_imbalance, 1.15);
  EXPECT_EQ(l->max_q_heads, 10);  // ceil(64 / 7): as balanced as the plain split
  const GqaLayout plain = plain_query_head_split(64, 8, 7);
  expect_consistent(plain, 64, 8, 7);
  EXPECT_EQ(plain.kv_copies, 14);  // 6 boundaries, none on a group boundary
  EXPECT_EQ(l->kv_copies, 11);     // 3 boundaries inside groups: the fewest with <= 10 heads
}

// Fewest copies over every assignment of heads to ranks (not only contiguous) with at most `cap`
// heads per rank.
std::int64_t brute_force_copies(std::int64_t n_q, std::int64_t n_kv, int ranks, std::int64_t cap) {
  std::int64_t best = -1;
  std::vector<int> owner(static_cast<size_t>(n_q), 0);
  for (;;) {
    std::vector<std::int64_t> count(static_cast<size_t>(ranks), 0);
    std::set<std::pair<int, std::int64_t>> held;
    for (std::int64_t h = 0; h < n_q; ++h) {
      ++count[static_cast<size_t>(owner[static_cast<size_t>(h)])];
      held.insert({owner[static_cast<size_t>(h)], h / (n_q / n_kv)});
    }
    if (*std::max_element(count.begin(), count.end()) <= cap) {
      const auto copies = static_cast<std::int64_t>(held.size());
      if (best < 0 || copies < best) best = copies;
    }
    size_t i = 0;
    while (i < owner.size() && ++owner[i] == ranks) owner[i++] = 0;
    if (i == owner.size()) return best;
  }
}

TEST(GqaLayoutTest, FewestCopiesOverEveryAssignmentOnSmallCases) {
  for (auto [n_q, n_kv, ranks] : std::vector<std::tuple<std::int64_t, std::int64_t, int>>{
           {8, 2, 3}, {8, 4, 3}, {9, 3, 2}, {9, 3, 4}, {10, 2, 3}, {6, 3, 4}, {8, 1, 3}}) {
    SCOPED_TRACE(std::to_string(n_q) + "/" + std::to_string(n_kv) + " over " +
                 std::to_string(ranks));
    auto l = balance_query_heads(n_q, n_kv, ranks);
    ASSERT_TRUE(l.ok());
    expect_consistent(*l, n_q, n_kv, ranks);
    EXPECT_EQ(l->max_q_heads, (n_q + ranks - 1) / ranks);
    EXPECT_EQ(l->kv_copies, brute_force_copies(n_q, n_kv, ranks, l->max_q_heads));
    EXPECT_LE(l->kv_copies, plain_query_head_split(n_q, n_kv, ranks).kv_copies);
  }
}

TEST(GqaLayoutTest, LooserCapTradesBalanceForCopies) {
  // 8 heads in 2 groups over 3 ranks: with <= 3 heads per rank both groups are split (4 copies);
  // with 4 allowed (imbalance 1.5), ranks (4, 4, 0) need only 2.
  auto tight = balance_query_heads(8, 2, 3, 1.0);
  auto loose = balance_query_heads(8, 2, 3, 1.5);
  ASSERT_TRUE(tight.ok() && loose.ok());
  EXPECT_EQ(tight->kv_copies, 4);
  EXPECT_EQ(loose->kv_copies, 2);
  EXPECT_EQ(loose->max_q_heads, 4);
}

TEST(GqaLayoutTest, RejectsBadInputs) {
  EXPECT_FALSE(balance_query_heads(64, 7, 7).ok());
  EXPECT_FALSE(balance_query_heads(0, 1, 7).ok());
  EXPECT_FALSE(balance_query_heads(8, 2, 0).ok());
  EXPECT_FALSE(balance_query_heads(8, 2, 3, 0.9).ok());
}

TEST(GqaLayoutTest, DuplicationCostFigures) {
  struct Case {
    const char* model;
    std::int64_t n_q, n_kv;
    int ranks;
    std::int64_t head_dim, hidden;
  };
  for (const Case& c : {Case{"Llama-3-70B shape", 64, 8, 7, 128, 8192},
                        Case{"Llama-3-8B shape", 32, 8, 7, 128, 4096},
                        Case{"8/2 toy, hidden 1024", 8, 2, 3, 128, 1024}}) {
    auto l = balance_query_heads(c.n_q, c.n_kv, c.ranks);
    ASSERT_TRUE(l.ok());
    const GqaLayout plain = plain_query_head_split(c.n_q, c.n_kv, c.ranks);
    const GqaLayout& balanced = *l;
    for (const GqaLayout* layout : {&plain, &balanced}) {
      const KvDuplicationCost cost = kv_duplication_cost(*layout, c.n_kv, c.head_dim, c.hidden, 2);
      std::string sizes;
      for (const GqaRankShare& r : layout->ranks) sizes += std::to_string(r.q_heads.size()) + ",";
      std::printf(
          "%-22s %2lld/%lld over %d %-9s sizes %-22s imbalance %.3f, KV copies %2lld "
          "(+%lld, +%.1f%%), max groups/rank %lld, extra bf16 K/V weights %.2f MiB/layer, "
          "extra K/V FLOPs %.2f MFLOP/token/layer\n",
          c.model, static_cast<long long>(c.n_q), static_cast<long long>(c.n_kv), c.ranks,
          layout == &plain ? "(plain)" : "(balance)", sizes.c_str(), layout->heads_imbalance,
          static_cast<long long>(layout->kv_copies), static_cast<long long>(cost.extra_copies),
          100 * cost.extra_fraction, static_cast<long long>(layout->max_kv_groups),
          cost.extra_weight_bytes / (1 << 20), cost.extra_flops_per_token / 1e6);
      EXPECT_GE(cost.extra_copies, 0);
    }
  }
}

}  // namespace
}  // namespace ntp::shard
