// FoldSyncStrategy: Megatron's core/extra fold, generalized to any mix of TP degrees at once.
//
// Let s be the smallest degree in the job (the sync degree). Every space is cut into s contiguous,
// balanced sync partitions P_0..P_{s-1}. In a replica of degree t >= s:
//   - core rank r < s owns the head of P_r (all of it when t == s);
//   - the tails of the partitions, concatenated in order, are dealt to the extra ranks s..t-1;
//   - unit counts are balanced over all t ranks (max - min <= 1), and the +1 counts go to core
//     ranks first, which keeps the fold traffic as small as balance allows.
// Folding moves each extra rank's gradients to the core rank of their partition; DP group (space,
// r) is core rank r of every replica reducing P_r, so groups line up element for element across
// replicas of any degree. Extra ranks skip the DP reduction; the unfold returns their share.
// Every replica then reduces 1/s of the gradients per core rank instead of 1/t (the 1/t_min
// effect).
#pragma once

#include "shard/sync_plan.h"

namespace ntp::shard {

// Units of each of the `degree` ranks of one replica when the job's sync degree is `sync_degree`
// (1 <= sync_degree <= degree <= units). Exposed for tests and other strategies.
std::vector<IntervalSet> fold_layout(std::int64_t units, int degree, int sync_degree);

// Sync partition `index` of a space of `units` units cut into `sync_degree` balanced ranges.
IntervalSet sync_partition(std::int64_t units, int sync_degree, int index);

// Syncs over the least degree's partitions: core rank r < s of every replica represents partition
// P_r; the extra ranks of a larger replica fold their units into the core rank whose partition
// holds them. Over given units (plan_units) core rank r still represents P_r and any other rank
// holding units of P_r folds them into it (a slowed core rank holds less of P_r; a fast one may
// hold others' units).
class FoldSyncStrategy final : public SyncStrategy {
 public:
  std::string_view name() const override { return "fold"; }

 protected:
  int partitions(const std::vector<int>& degrees) const override;
  std::vector<IntervalSet> layout(std::int64_t units, int degree, int partitions) const override;
  DegreePlan sync_over(RankUnits units, int partitions, const std::vector<UnitSpace>& spaces,
                       const ByteCosts& bytes) const override;
};

}  // namespace ntp::shard
