// NativeSyncStrategy: healthy replicas keep their native layout; degraded ones exchange extra
// pieces.
//
// Every replica of degree t lays its units out contiguously and balanced over its t ranks (the
// layout uniform TP would use). Sync partitions are those of the *full* degree T (the domain size),
// so a healthy replica's rank p already holds partition P_p and never folds. In a degraded replica,
// partition P_p is represented by the rank that holds most of it (ties: the lower rank); the other
// ranks fold their pieces of P_p into it. A representative may stand for two partitions, so its DP
// buffer (and all-reduce time) grows: that is the price for never re-laying out healthy replicas
// when a failure changes the smallest degree. Compare with FoldSyncStrategy through SyncPlan costs.
#pragma once

#include "shard/sync_plan.h"

namespace ntp::shard {

class NativeSyncStrategy final : public SyncStrategy {
 public:
  // `full_degree` is the domain size: the degree of a healthy replica.
  explicit NativeSyncStrategy(int full_degree) : full_degree_(full_degree) {}
  std::string_view name() const override { return "native"; }

 protected:
  int partitions(const std::vector<int>&) const override { return full_degree_; }
  // Balanced contiguous blocks over the replica's own degree (at most the full degree).
  std::vector<IntervalSet> layout(std::int64_t units, int degree, int partitions) const override;
  // Each partition of the full degree is represented by the rank holding most of it (ties: the
  // lower rank); the others fold their pieces of it into that rank.
  DegreePlan sync_over(RankUnits units, int partitions, const std::vector<UnitSpace>& spaces,
                       const ByteCosts& bytes) const override;

 private:
  int full_degree_;
};

}  // namespace ntp::shard
