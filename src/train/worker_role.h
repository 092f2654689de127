// WorkerRole: the bridge from the layout algebra to one worker process.
//
// Given the job's ClusterLayout (shard/cluster_layout.h) and a device slot, it says everything
// that worker needs and nothing else re-derives: its world rank, its replica and TP rank, the
// units of each space it computes (its model shard), whom it folds gradients to and from, and
// the DP communicators of the sync plan it is a member of with what it reduces in each.
//
// World ranks number the active (non-failed) slots in (domain, slot) order. Parameters that every
// rank of a replica holds in full (LayerNorms, row-parallel biases, wpe) are synchronized once per
// replica: their rows are cut into `replicated_parts` = the smallest TP degree of the job balanced
// parts, part p reduced among TP rank p of every replica, then all-gathered inside the replica.
#pragma once

#include <string>
#include <vector>

#include "core/status.h"
#include "model/model_config.h"
#include "model/model_factory.h"
#include "shard/cluster_layout.h"

namespace ntp::train {

// The model shape the layout algebra counts a config's unit spaces from (shard/unit_space.h: heads,
// ffn, vocab, and for grouped-query families kv and head_rows).
shard::ModelShape model_shape(const model::ModelConfig& config);

// One fold exchange of this rank: `units` of `space` go to (fold_out) or come from (fold_in) TP
// rank `peer` of the same replica.
struct FoldLink {
  int space = 0;
  int peer = 0;
  shard::IntervalSet units;
};

// What one member reduces in a DP communicator: the units of a sync-plan group (space >= 0), or
// replicated part `part` (space == kReplicated).
struct DpSlice {
  static constexpr int kReplicated = -1;
  int space = kReplicated;
  shard::IntervalSet units;  // space >= 0
  int part = 0;              // space == kReplicated
};

// A DP communicator: the same members reduce the same slices, in this order, every bucket.
struct DpSet {
  std::string name;              // "dp<k>": k is the set's index in the job-wide order
  std::vector<int> world_ranks;  // members, increasing (one per replica, in domain order)
  int my_index = -1;             // this worker's rank in the communicator
  std::vector<DpSlice> slices;
};

struct WorkerRole {
  shard::SlotRef slot;
  int world_rank = 0;
  int world_size = 0;
  int replica = 0;        // = domain
  int replicas = 0;       // replicas in the job (domains that left the job are not counted)
  int replica_index = 0;  // this replica's place among them
  int tp_rank = 0;
  int degree = 0;
  std::vector<int> replica_world_ranks;  // [tp rank]
  // The replica's communicators span replica_world_ranks in increasing order (layouts planned
  // from a previous one may run TP rank k on any slot): comm_tp_rank[c] is the TP rank of
  // communicator rank c.
  std::vector<int> comm_tp_rank;
  std::vector<int> replica_members() const;  // replica_world_ranks, increasing
  std::vector<int> replica_degrees;          // [domain]
  std::vector<shard::IntervalSet> units;     // [space]: what this rank computes
  // What this rank stores, [space]: its units, plus for a derived space (shard/unit_space.h, the
  // KV groups of grouped-query attention) copies of units another rank owns, every one its source
  // units need. Equal to `units` for the other spaces.
  std::vector<shard::IntervalSet> held;
  // [space][tp rank]: the units of a derived space that rank owns and another rank of the replica
  // holds a copy of (empty for other spaces). After every update of such a unit (the reduced
  // gradient, a ZeRO-1 publication) the owner's data is copied to the holders.
  std::vector<std::vector<shard::IntervalSet>> shared_owned;
  bool replica_shares = false;  // some shared_owned set is non-empty
  model::ModelShard shard;      // the same units as ascending id lists
  std::vector<FoldLink> fold_out, fold_in;
  // Whether any rank of this replica folds (then every rank of it joins the fold exchanges).
  bool replica_folds = false;
  int replicated_parts = 1;
  // The DP sets this worker belongs to, in the job-wide order (every member walks them in the
  // same order, so reductions on several communicators never wait on each other in a cycle).
  std::vector<DpSet> dp_sets;
};

// The units of derived `space` (shard/unit_space.h: grouped-query KV groups) that a rank whose
// units of the source space are `source` stores: every group one of its source units reads (it
// owns some of them, and holds copies of the others).
shard::IntervalSet held_derived_units(const shard::UnitSpace& space,
                                      const shard::IntervalSet& source);

// What `slot` stores of `space` in `layout` (WorkerRole::held): its units, and for a derived space
// the groups its source units read; empty for a slot without a role there.
shard::IntervalSet held_units_of(const shard::ClusterLayout& layout, shard::SlotRef slot,
                                 int space);

// The active slots in world-rank order.
std::vector<shard::SlotRef> active_slots(const shard::ClusterLayout& layout);

// The role of `slot`; kInvalidArgument when the slot is failed or outside the cluster.
Result<WorkerRole> worker_role(const shard::ClusterLayout& layout, shard::SlotRef slot);

}  // namespace ntp::train
