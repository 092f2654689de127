// Checkpoints of a training job (format and guarantees: docs/checkpoint.md).
//
// What each worker writes, so that every logical element of every kind is stored exactly once
// and every rank of every replica writes a share:
//   value        the spread rule (checkpoint/spread.h): each tensor's units cut into parts, one
//                per replica, written by the ranks holding them, replicated tensors' rows cut
//                among all ranks (all replicas hold the same weights, bit for bit); a unit held
//                as a copy (Param::unit_copy) is left to its owner;
//   exp_avg(_sq) replicated optimizer: the spread rule too (all replicas hold the same moments);
//                ZeRO-1: every rank its owned chunks (each element is owned by exactly one rank).
// Checkpoints written by replica 0 alone (before the spread) are the same format and load too.
// Everything is addressed by logical tensor and slice (checkpoint/piece.h), so a checkpoint
// written at one layout loads at any other: another DP size, any mix of TP degrees, either sync
// strategy, replicated or sharded optimizer state.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "checkpoint/async_shard_writer.h"
#include "checkpoint/manifest.h"
#include "checkpoint/reader.h"
#include "checkpoint/spread.h"
#include "comm/communicator.h"
#include "train/adamw_optimizer.h"
#include "train/sharded_adamw.h"
#include "train/sync_executor.h"
#include "train/train_config.h"
#include "train/worker_role.h"

namespace ntp::train {

// Borrowed views of one worker's training state.
struct WorkerState {
  const WorkerRole& role;
  std::vector<model::Param>& params;
  AdamWOptimizer* adamw = nullptr;  // replicated optimizer, or
  ShardedAdamW* sharded = nullptr;  // ZeRO-1 (then `sync` gives the owned chunks)
  const SyncExecutor* sync = nullptr;
  int64_t optimizer_steps() const;
};

// The pieces this worker writes (see above); views into the live state.
std::vector<checkpoint::PieceView> checkpoint_pieces(WorkerState& state,
                                                     const checkpoint::SpreadOptions& spread = {});

// The manifest's metadata for the state after `step` committed steps, written by the live layout
// whose inactive slots are `failed` (after a re-formation, not the job's start layout).
checkpoint::CheckpointMeta checkpoint_meta(const TrainConfig& config, int64_t step,
                                           int64_t optimizer_steps,
                                           const std::vector<shard::SlotRef>& failed);

// Reads a piece of a logical tensor (checkpoint::CheckpointReader::read, train/weight_source.h).
using PieceRead = std::function<Status(const checkpoint::PieceSpec&, std::span<float>)>;

// Loads only the weights ("value" pieces) into this worker's params and, with ZeRO-1, its owned
// fp32 master chunks; the optimizer state is left as it is (fresh at the start of a run).
Status load_values(const PieceRead& read, WorkerState& state);

// Loads weights, moments and the optimizer's step count from `reader` into this worker's state,
// whatever layout wrote them. kInvalidArgument (naming the field) when the checkpoint's model
// differs from `config`'s. Returns the step to continue from.
Result<int64_t> load_checkpoint(const checkpoint::CheckpointReader& reader,
                                const TrainConfig& config, WorkerState& state);

// Writes checkpoints in the background: start() snapshots this worker's pieces (the only time
// the training loop is blocked) and writes them on a thread; finish() is called by every worker
// at the same step, waits for its write, exchanges the shard records over `world`, and world
// rank 0 commits (manifest last, `latest` after it, keep-last-K pruning).
class CheckpointSaver {
 public:
  CheckpointSaver(std::string save_dir, int keep_last, std::string writer);
  // `meta` describes the state the pieces hold (checkpoint_meta).
  Status start(checkpoint::CheckpointMeta meta, std::span<const checkpoint::PieceView> pieces);
  bool pending() const { return pending_.has_value(); }
  // Drops a save that cannot be committed any more (its job was re-formed): waits for its write
  // and forgets it; the step directory stays incomplete and is pruned by a later commit.
  void abandon();
  // Returns the committed step directory on world rank 0 (empty elsewhere); no-op if not pending.
  Result<std::string> finish(comm::Communicator& world);
  int64_t pending_step() const { return pending_ ? pending_->step : -1; }
  // Seconds the last start() blocked the caller (the snapshot copy).
  double last_blocked_s() const { return last_blocked_s_; }

 private:
  std::string save_dir_;
  int keep_last_;
  std::string writer_;
  checkpoint::AsyncShardWriter writer_thread_;
  std::optional<checkpoint::CheckpointMeta> pending_;  // the save being written
  bool wrote_ = false;                                 // this worker had pieces to write
  double last_blocked_s_ = 0.0;
};

}  // namespace ntp::train
