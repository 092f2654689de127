// SyncPlan: how replicas of different TP degrees synchronize gradients, and what it costs per rank.
//
// A plan has three phases per step, all inside one step's backward pass:
//   fold    inside each replica, `folds` move gradient units from the rank that computed them to
//   the
//           rank that represents them in the DP reduction;
//   reduce  each DpGroup all-reduces (sample-weighted sum) the same units, element for element,
//   among
//           one rank of every replica;
//   unfold  the folds run in reverse, returning the reduced gradients to their owners.
// Ranks are TP ranks of a replica (ReplicaLayout::slots maps them to device slots); replicas are
// identified by their domain.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "shard/interval_set.h"
#include "shard/replica_layout.h"
#include "shard/unit_space.h"

namespace ntp::shard {

struct RankRef {
  int domain = 0;
  int rank = 0;
  friend bool operator==(const RankRef&, const RankRef&) = default;
};

struct FoldTransfer {
  int space = 0;
  int domain = 0;
  int from_rank = 0;  // computes these gradients (an "extra" rank)
  int to_rank = 0;    // reduces them across DP (a "core" rank)
  IntervalSet units;
};

struct DpGroup {
  int space = 0;
  int index = 0;                 // partition index within the space
  IntervalSet units;             // identical for every member
  std::vector<RankRef> members;  // one rank of every replica, in domain order
};

// Bytes one rank moves for gradient synchronization in one step.
struct RankSyncCost {
  std::int64_t fold_out_bytes = 0;  // sent in the fold (and received back in the unfold)
  std::int64_t fold_in_bytes = 0;   // received in the fold (and sent back in the unfold)
  std::int64_t dp_bytes = 0;        // size of its buffer in the DP all-reduce
};

struct SyncPlan {
  std::string strategy;
  int sync_degree = 0;  // ranks per replica that join the DP reduction
  std::vector<FoldTransfer> folds;
  std::vector<DpGroup> groups;
  std::vector<std::vector<RankSyncCost>> costs;  // costs[domain][rank]
};

// What a strategy decides: every replica's rank -> units assignment and the sync plan over it.
struct StrategyPlan {
  std::vector<RankUnits> units;  // units[domain][space][rank]
  SyncPlan sync;
};

struct DegreePlan;  // shard/degree_plan.h

// A way to lay out replicas of mixed TP degrees and synchronize their gradients. A strategy names
// its sync partitions, how a replica of a given degree lays out a space over its ranks, and how one
// replica's ranks fold their units into the partitions' representatives; plan and plan_units
// assemble those for every replica (shard/degree_plan.cpp). Implementations must be pure functions
// of their inputs, so every rank computes the same plan.
class SyncStrategy {
 public:
  virtual ~SyncStrategy() = default;
  virtual std::string_view name() const = 0;
  // degrees[d] is the TP degree of the replica in domain d (each >= 1 and <= every space's units).
  StrategyPlan plan(const std::vector<int>& degrees, const std::vector<UnitSpace>& spaces,
                    const ByteCosts& bytes) const;
  // The plan over units the caller fixed (units[d][space][rank], e.g. speed-weighted layouts,
  // shard/weighted_layout.h): the strategy derives only the sync (folds, DP groups, costs) over
  // them, with the partitions plan(degrees, ...) uses. Each units[d][space] must be a partition of
  // the space over degrees[d] ranks. Passing plan(degrees, ...).units gives plan(degrees, ...).
  StrategyPlan plan_units(const std::vector<int>& degrees, std::vector<RankUnits> units,
                          const std::vector<UnitSpace>& spaces, const ByteCosts& bytes) const;

 protected:
  // The number of sync partitions (DP groups per space) for replicas of `degrees` (non-empty).
  virtual int partitions(const std::vector<int>& degrees) const = 0;
  // The units of a space of `units` units on each of a replica's `degree` ranks.
  virtual std::vector<IntervalSet> layout(std::int64_t units, int degree, int partitions) const = 0;
  // One replica's folds, DP costs and representatives over `units` ([space][rank]).
  virtual DegreePlan sync_over(RankUnits units, int partitions,
                               const std::vector<UnitSpace>& spaces,
                               const ByteCosts& bytes) const = 0;
};

}  // namespace ntp::shard
