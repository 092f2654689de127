#include "shard/gqa_layout.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <tuple>

#include "shard/balance.h"

namespace ntp::shard {
namespace {

// KV groups (of q query heads each) that query heads [a, b) read.
std::int64_t groups_spanned(std::int64_t a, std::int64_t b, std::int64_t q) {
  return b > a ? (b - 1) / q - a / q + 1 : 0;
}

GqaLayout from_sizes(const std::vector<std::int64_t>& sizes, std::int64_t n_q, std::int64_t n_kv) {
  const std::int64_t q = n_q / n_kv;
  GqaLayout out;
  std::int64_t begin = 0;
  for (std::int64_t size : sizes) {
    GqaRankShare share;
    for (std::int64_t h = begin; h < begin + size; ++h) {
      share.q_heads.push_back(h);
      if (share.kv_groups.empty() || share.kv_groups.back() != h / q) {
        share.kv_groups.push_back(h / q);
      }
    }
    out.kv_copies += static_cast<std::int64_t>(share.kv_groups.size());
    out.max_q_heads = std::max(out.max_q_heads, size);
    out.max_kv_groups =
        std::max(out.max_kv_groups, static_cast<std::int64_t>(share.kv_groups.size()));
    out.ranks.push_back(std::move(share));
    begin += size;
  }
  out.heads_imbalance = static_cast<double>(out.max_q_heads) * static_cast<double>(sizes.size()) /
                        static_cast<double>(n_q);
  return out;
}

// Range sizes for `ranks` ranks of at most `cap` heads each with the fewest KV copies, then the
// smallest sum of squares, then lexicographically smallest; empty when no split fits the cap.
std::vector<std::int64_t> best_sizes(std::int64_t n_q, std::int64_t q, int ranks,
                                     std::int64_t cap) {
  using Cost = std::tuple<std::int64_t, std::int64_t>;  // (copies, sum of squares)
  const Cost kNone{std::numeric_limits<std::int64_t>::max(), 0};
  // best[r][p]: cost of assigning heads [p, n_q) to ranks r .. ranks - 1; choice = first size.
  std::vector<std::vector<Cost>> best(static_cast<size_t>(ranks) + 1,
                                      std::vector<Cost>(static_cast<size_t>(n_q) + 1, kNone));
  std::vector<std::vector<std::int64_t>> choice(
      static_cast<size_t>(ranks), std::vector<std::int64_t>(static_cast<size_t>(n_q) + 1, -1));
  best[static_cast<size_t>(ranks)][static_cast<size_t>(n_q)] = Cost{0, 0};
  for (int r = ranks - 1; r >= 0; --r) {
    for (std::int64_t p = 0; p <= n_q; ++p) {
      for (std::int64_t s = 0; s <= std::min(cap, n_q - p); ++s) {  // ascending: smallest first
        const Cost& rest = best[static_cast<size_t>(r) + 1][static_cast<size_t>(p + s)];
        if (std::get<0>(rest) == std::get<0>(kNone)) continue;
        const Cost cost{std::get<0>(rest) + groups_spanned(p, p + s, q), std::get<1>(rest) + s * s};
        if (cost < best[static_cast<size_t>(r)][static_cast<size_t>(p)]) {
          best[static_cast<size_t>(r)][static_cast<size_t>(p)] = cost;
          choice[static_cast<size_t>(r)][static_cast<size_t>(p)] = s;
        }
      }
    }
  }
  if (std::get<0>(best[0][0]) == std::get<0>(kNone)) return {};
  std::vector<std::int64_t> sizes;
  std::int64_t p = 0;
  for (int r = 0; r < ranks; ++r) {
    const std::int64_t s = choice[static_cast<size_t>(r)][static_cast<size_t>(p)];
    sizes.push_back(s);
    p += s;
  }
  return sizes;
}

}  // namespace

Result<GqaLayout> balance_query_heads(std::int64_t n_q, std::int64_t n_kv, int ranks,
                                      double max_imbalance) {
  if (n_q <= 0 || n_kv <= 0 || ranks <= 0) {
    return invalid_argument("query heads (" + std::to_string(n_q) + "), KV heads (" +
                            std::to_string(n_kv) + ") and ranks (" + std::to_string(ranks) +
                            ") must all be > 0");
  }
  if (n_q % n_kv != 0) {
    return invalid_argument("query heads " + std::to_string(n_q) +
                            " are not a multiple of KV heads " + std::to_string(n_kv));
  }
  if (!(max_imbalance >= 1.0)) {
    return invalid_argument("max_imbalance " + std::to_string(max_imbalance) + " must be >= 1");
  }
  const std::int64_t tightest = max_units_per_rank(n_q, ranks);
  const auto loosest = std::max(
      tightest, static_cast<std::int64_t>(std::floor(max_imbalance * static_cast<double>(n_q) /
                                                     static_cast<double>(ranks))));
  // The smallest cap reaching the fewest copies any allowed cap reaches.
  std::vector<std::int64_t> chosen;
  std::int64_t chosen_copies = std::numeric_limits<std::int64_t>::max();
  for (std::int64_t cap = tightest; cap <= loosest; ++cap) {
    std::vector<std::int64_t> sizes = best_sizes(n_q, n_q / n_kv, ranks, cap);
    const std::int64_t copies = from_sizes(sizes, n_q, n_kv).kv_copies;
    if (copies < chosen_copies) chosen = std::move(sizes), chosen_copies = copies;
  }
  return from_sizes(chosen, n_q, n_kv);
}

GqaLayout plain_query_head_split(std::int64_t n_q, std::int64_t n_kv, int ranks) {
  std::vector<std::int64_t> sizes;
  for (int r = 0; r < ranks; ++r) sizes.push_back(balanced_count(n_q, ranks, r));
  return from_sizes(sizes, n_q, n_kv);
}

KvDuplicationCost kv_duplication_cost(const GqaLayout& layout, std::int64_t n_kv,
                                      std::int64_t head_dim, std::int64_t hidden,
                                      double bytes_per_param) {
  KvDuplicationCost cost;
  cost.extra_copies = layout.kv_copies - n_kv;
  cost.extra_fraction = static_cast<double>(cost.extra_copies) / static_cast<double>(n_kv);
  // One group's K and V projections: 2 matrices of head_dim x hidden.
  const double group_params = 2.0 * static_cast<double>(head_dim) * static_cast<double>(hidden);
  cost.extra_weight_bytes = static_cast<double>(cost.extra_copies) * group_params * bytes_per_param;
  cost.extra_flops_per_token = static_cast<double>(cost.extra_copies) * 2.0 * group_params;
  return cost;
}

}  // namespace ntp::shard
