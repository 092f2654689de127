// SyncExecutor: runs a worker's part of the job's gradient sync plan, bucket by bucket, overlapped
// with backward.
//
// It executes whatever the layout algebra planned (train/worker_role.h): the fold exchanges inside
// the replica, the reductions of every DP set, the unfolds, and the once-per-replica sync of
// replicated tensors; strategies differ only in the plan, never here. Per bucket:
//   collect   pack this rank's gradients of the bucket and, when the replica folds, exchange the
//             folded units with an alltoallv on the replica communicator, so every DP member holds
//             its slices whole (unit blocks, train/unit_blocks.h);
//   reduce    sum each DP set's buffer over its members (one per replica): an allreduce, or with a
//             sharded optimizer (ZeRO-1) a reduce-scatter that leaves each member its own chunk;
//   distribute (replicated optimizer) write the sums back: own units directly, folded units to
//             their owners (the reverse alltoallv), replicated parts by an all-gather in the
//             replica;
//   copy      units of a derived space held by several ranks of the replica (grouped-query KV
//             groups, WorkerRole::held): the model already summed their gradient inside the
//             replica, the plan reduces the owner's copy only, and afterwards the owner's result
//             is all-gathered to the other holders (replicated optimizer: the gradient, which
//             steps every holder's optimizer state alike; ZeRO-1: the published weights).
// With a sharded optimizer, publish_values() runs the same distribute (and copy) on the updated
// weights after an all-gather of every member's chunk.
//
// Buckets are consecutive groups of `ready_order` (the model's backward order) holding at least
// `bucket_bytes` of logical fp32 parameters, so every rank of the job cuts the same buckets. A
// bucket starts on the executor's thread as soon as backward reported all its parameters. Every
// member walks buckets in order and, within one, its DP sets in the job-wide order: collectives on
// several communicators never wait on each other in a cycle.
//
// Gradients accumulate loss_scale-weighted sample means (model/model.h), so the DP reductions
// are plain sums and the result is the global batch's sample-weighted mean gradient.
// On any failure every communicator is aborted (peers fail fast) and wait() returns the error.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <span>
#include <thread>
#include <vector>

#include "comm/communicator.h"
#include "core/non_copyable.h"
#include "core/status.h"
#include "model/param.h"
#include "train/unit_blocks.h"
#include "train/worker_role.h"

namespace ntp::train {

enum class OptimizerSharding { kReplicated, kSharded };

struct SyncComms {
  comm::Communicator* replica = nullptr;  // the replica's TP ranks; not the model's own TP group
  std::vector<comm::Communicator*> dp;    // dp[i] runs role.dp_sets[i]
};

struct SyncOptions {
  int64_t bucket_bytes = 128 << 10;
  OptimizerSharding sharding = OptimizerSharding::kReplicated;
};

// A ZeRO-1 chunk this rank owns: its share of one DP set's slices of one bucket.
struct OwnedChunk {
  BlockLayout layout;       // blocks at offsets within the chunk
  std::vector<float> grad;  // the reduced gradient, valid after wait()
};

// Measurements of the last step, on the executor's clock (seconds since construction).
struct SyncStats {
  double backward_done = 0;                        // when the last parameter was reported
  std::vector<std::pair<double, double>> buckets;  // [start, end) of each bucket's sync
  int64_t fold_bytes_sent = 0;                     // fold + unfold bytes this rank sent
  int64_t dp_bytes = 0;                            // bytes of its DP buffers

  // Share of the step's sync time that ran before backward finished (1 = fully hidden).
  double overlap_fraction() const;
};

class SyncExecutor : NonCopyable {
 public:
  SyncExecutor(const WorkerRole& role, std::vector<model::Param>& params,
               const std::vector<std::vector<int>>& ready_order, SyncComms comms,
               SyncOptions options);
  ~SyncExecutor();

  // Backward's callback (model::BackwardOptions::on_grads_ready): these gradients are final.
  void grads_ready(std::span<const int> params);
  // Waits for every bucket of the step; then resets for the next step. The first error.
  Status wait();
  // Sum of squares of the reduced gradient elements this rank accounts for, valid after wait():
  // every logical element of the model is accounted by exactly one rank of the job.
  double accounted_sum_of_squares() const;
  const SyncStats& stats() const { return stats_; }

  // --- sharded optimizer (ZeRO-1) ---
  std::vector<OwnedChunk>& owned_chunks() { return owned_; }
  const std::vector<OwnedChunk>& owned_chunks() const { return owned_; }
  // The current weights of every owned chunk (collected from the ranks that hold them).
  Result<std::vector<std::vector<float>>> owned_values();
  // All-gathers every member's updated chunk and writes the weights into every rank's params.
  Status publish_values(const std::vector<std::vector<float>>& values);
  // Live recovery's redundant copy of the moments: in every DP set of more than one member,
  // member j holds a copy of member j-1's chunk (cyclically), so one lost rank's moments survive
  // on its DP peer. mirror_layouts()[k] is the k-th copy's blocks. mirror_moments sends each owned
  // chunk's moments `m`, `v` (owned_chunks order) to the next member and receives the previous
  // member's into `mirror_m`, `mirror_v` (mirror_layouts order): a collective of every DP set.
  const std::vector<BlockLayout>& mirror_layouts() const { return mirrors_; }
  Status mirror_moments(const std::vector<std::vector<float>>& m,
                        const std::vector<std::vector<float>>& v,
                        std::vector<std::vector<float>>& mirror_m,
                        std::vector<std::vector<float>>& mirror_v);

 private:
  struct Bucket;
  enum class Target { kGrad, kValue };

  void build_bucket(Bucket& b, const std::vector<int>& params);
  shard::IntervalSet local_units(int param) const;
  float* storage(int param, Target target);
  Status collect(Bucket& b, Target source);
  Status reduce(Bucket& b);
  Status distribute(Bucket& b, Target target);
  // Collective over the replica: packs the blocks of `layout` that fall in this rank's share of
  // the flat buffer (`counts` per rank, in communicator order) from `target` into `mine`,
  // all-gathers every share into `buf`, then writes all of `layout` back into `target`.
  Status allgather_blocks(const BlockLayout& layout, const std::vector<size_t>& counts,
                          std::vector<float>& mine, std::vector<float>& buf, Target target);
  // Writes the owners' data of shared derived-space units into the other holders' copies
  // (collective over the replica when the bucket has such units).
  Status copy_to_holders(Bucket& b, Target target);
  Status sync_bucket(Bucket& b);
  void fail(const Status& status);
  void run();
  double now() const;
  int my_comm_rank() const;  // this worker's rank in the replica communicator

  const WorkerRole& role_;
  std::vector<model::Param>& params_;
  std::vector<ParamGeometry> geometry_;
  SyncComms comms_;
  SyncOptions options_;
  std::vector<Bucket> buckets_;
  std::vector<int> bucket_of_;  // [param]
  std::vector<OwnedChunk> owned_;
  std::vector<BlockLayout> mirrors_;  // the previous DP member's chunk, per (bucket, set)
  SyncStats stats_;
  std::chrono::steady_clock::time_point epoch_;

  std::mutex mutex_;
  std::condition_variable cv_;
  std::vector<int> missing_;  // [bucket]: parameters not yet reported this step
  int next_to_queue_ = 0;     // buckets are queued in order
  int queued_ = 0, done_ = 0;
  Status error_;
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace ntp::train
