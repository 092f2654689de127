// Query heads of a grouped-query-attention (GQA) model over the ranks of one TP replica, and what
// the KV groups cost.
//
// In GQA, n_q query heads share n_kv key/value heads: KV group g serves the q = n_q / n_kv
// consecutive query heads [g q, (g + 1) q). A rank holds the K/V projection of every group any of
// its query heads reads, so when a group's query heads sit on several ranks each of them holds
// (and computes) a copy. Any assignment of query heads is a valid layout (model/llama_shard.h);
// this one is chosen to keep the slowest rank's query heads at the minimum and, among such
// layouts, to need the fewest KV copies.
//
// Scheme: ranks take contiguous ranges of query heads in head order (a range spans the fewest
// groups for its size). Every rank holds at most `cap` heads, cap = max(ceil(n_q / R),
// floor(max_imbalance * n_q / R)); among the range sizes (sum n_q, each <= cap) a dynamic program
// picks the fewest total KV copies, then the smallest largest range, then the smallest sum of
// squared sizes (the most even), then the lexicographically smallest sizes (deterministic). With
// max_imbalance = 1 the largest rank has ceil(n_q / R) heads, as in the plain balanced split, but
// range boundaries move to group boundaries where the cap allows: 64 query heads in 8 groups over
// 7 ranks need 11 KV copies (sizes 8,8,8,10,10,10,10) instead of the plain split's 14
// (10,9,9,9,9,9,9).
// Pure; same inputs, same layout on every rank.
#pragma once

#include <cstdint>
#include <vector>

#include "core/status.h"

namespace ntp::shard {

struct GqaRankShare {
  std::vector<std::int64_t> q_heads;    // ascending
  std::vector<std::int64_t> kv_groups;  // ascending: every group the rank's query heads read
};

struct GqaLayout {
  std::vector<GqaRankShare> ranks;
  std::int64_t kv_copies = 0;      // sum over ranks of kv_groups.size() (>= n_kv)
  std::int64_t max_q_heads = 0;    // on the busiest rank
  double heads_imbalance = 1.0;    // max_q_heads / (n_q / R)
  std::int64_t max_kv_groups = 0;  // KV groups on the rank holding the most
};

// kInvalidArgument unless n_q, n_kv, ranks > 0, n_q % n_kv == 0 and max_imbalance >= 1.
Result<GqaLayout> balance_query_heads(std::int64_t n_q, std::int64_t n_kv, int ranks,
                                      double max_imbalance = 1.0);

// The plain balanced contiguous split (balance.h: the first n_q % R ranks get one more head) and
// the KV groups it makes each rank hold: the baseline balance_query_heads improves on.
GqaLayout plain_query_head_split(std::int64_t n_q, std::int64_t n_kv, int ranks);

// What the KV copies cost, per layer, against holding each group once (no duplication).
struct KvDuplicationCost {
  std::int64_t extra_copies = 0;       // kv_copies - n_kv
  double extra_fraction = 0.0;         // extra_copies / n_kv: both of the figures below, relative
  double extra_weight_bytes = 0.0;     // of k_proj + v_proj weights, whole replica
  double extra_flops_per_token = 0.0;  // of the K and V projections, forward (2 per multiply-add)
};
// head_dim and hidden give the projection sizes; bytes_per_param the weight storage (2 for bf16).
KvDuplicationCost kv_duplication_cost(const GqaLayout& layout, std::int64_t n_kv,
                                      std::int64_t head_dim, std::int64_t hidden,
                                      double bytes_per_param);

}  // namespace ntp::shard
