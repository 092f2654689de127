#include "train/batch_split.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "shard/balance.h"

namespace ntp::train {

Result<BatchPolicy> parse_batch_policy(std::string_view text) {
  if (text == "keep") return BatchPolicy::kKeep;
  if (text == "scale") return BatchPolicy::kScale;
  return invalid_argument("--batch-policy '" + std::string(text) +
                          "' is unknown; use keep or scale");
}

const char* batch_policy_name(BatchPolicy policy) {
  return policy == BatchPolicy::kKeep ? "keep" : "scale";
}

Result<std::vector<ReplicaBatch>> split_global_batch(BatchPolicy policy,
                                                     const std::vector<int>& degrees,
                                                     int full_degree, int64_t global_batch,
                                                     int64_t micro_batch) {
  const auto replicas = static_cast<int64_t>(degrees.size());
  if (micro_batch < 1) {
    return invalid_argument("--micro-batch must be at least 1, got " + std::to_string(micro_batch));
  }
  if (global_batch < 1 || global_batch % micro_batch != 0) {
    return invalid_argument("--batch " + std::to_string(global_batch) +
                            " must be a positive multiple of --micro-batch " +
                            std::to_string(micro_batch));
  }
  const int64_t micro_total = global_batch / micro_batch;
  if (micro_total < replicas) {
    return invalid_argument(
        "--batch " + std::to_string(global_batch) + " holds " + std::to_string(micro_total) +
        " micro-batches of " + std::to_string(micro_batch) + ", fewer than the " +
        std::to_string(replicas) + " replicas; every replica needs at least one (raise --batch)");
  }
  std::vector<int64_t> micro(static_cast<size_t>(replicas));
  for (int64_t d = 0; d < replicas; ++d) {
    micro[static_cast<size_t>(d)] = shard::balanced_count(micro_total, replicas, d);
  }
  if (policy == BatchPolicy::kScale) {
    int64_t total_devices = 0;
    for (int t : degrees) total_devices += t;
    int64_t degraded_micro = 0;
    std::vector<int64_t> healthy;
    for (int64_t d = 0; d < replicas; ++d) {
      const int t = degrees[static_cast<size_t>(d)];
      if (t >= full_degree) {
        healthy.push_back(d);
        continue;
      }
      const double ideal =
          static_cast<double>(micro_total) * t / static_cast<double>(total_devices);
      micro[static_cast<size_t>(d)] = std::max<int64_t>(1, std::llround(ideal));
      degraded_micro += micro[static_cast<size_t>(d)];
    }
    const int64_t rest = micro_total - degraded_micro;
    const auto n_healthy = static_cast<int64_t>(healthy.size());
    if (n_healthy > 0 && rest < n_healthy) {
      return invalid_argument("--batch " + std::to_string(global_batch) +
                              " is too small for --batch-policy scale: the healthy replicas get " +
                              std::to_string(rest) + " micro-batches for " +
                              std::to_string(n_healthy) + " replicas (raise --batch)");
    }
    if (n_healthy == 0 && rest != 0) {
      // Every replica is degraded: give the rounding remainder to the largest ones first.
      std::vector<int64_t> order(static_cast<size_t>(replicas));
      for (int64_t d = 0; d < replicas; ++d) order[static_cast<size_t>(d)] = d;
      std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) {
        return degrees[static_cast<size_t>(a)] > degrees[static_cast<size_t>(b)];
      });
      int64_t left = rest;
      for (size_t i = 0; left != 0; i = (i + 1) % order.size()) {
        int64_t& m = micro[static_cast<size_t>(order[i])];
        if (left > 0) {
          ++m, --left;
        } else if (m > 1) {
          --m, ++left;
        }
      }
    }
    for (int64_t i = 0; i < n_healthy; ++i) {
      micro[static_cast<size_t>(healthy[static_cast<size_t>(i)])] =
          shard::balanced_count(rest, n_healthy, i);
    }
  }
  std::vector<ReplicaBatch> out;
  int64_t begin = 0;
  for (int64_t m : micro) {
    out.push_back({begin, m * micro_batch, m});
    begin += m * micro_batch;
  }
  return out;
}

}  // namespace ntp::train
