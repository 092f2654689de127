// AsyncShardWriter: writes a rank's shard on a background thread while training goes on.
//
// The caller takes a Snapshot (a copy, on the training thread: the only time it is blocked) and
// hands it over with start(). At most one snapshot is in flight: start() first waits for the
// previous save to finish, which bounds memory to one snapshot plus the live state. Results are
// collected in order with wait(); one is kept per save until collected.
#pragma once

#include <atomic>
#include <deque>
#include <filesystem>
#include <optional>
#include <span>
#include <string>
#include <thread>

#include "checkpoint/shard_writer.h"
#include "core/non_copyable.h"

namespace ntp::checkpoint {

class AsyncShardWriter : NonCopyable {
 public:
  explicit AsyncShardWriter(ShardWriteOptions options = {}) : options_(std::move(options)) {}
  // Waits for a save in flight (its result is dropped).
  ~AsyncShardWriter();

  // Snapshot::copy_of(pieces), reusing the memory of the last finished save's snapshot when it
  // is large enough (saves of the same state then copy without page faults). Call it on the
  // training thread; it does not wait for a save in flight.
  Result<Snapshot> snapshot(std::span<const PieceView> pieces);
  // Blocks while the previous save is still being written, then starts writing `snapshot` as
  // step_dir/shard_<writer>.safetensors on the background thread and returns.
  void start(std::filesystem::path step_dir, std::string writer, Snapshot snapshot);
  // True while a save is being written.
  bool busy() const { return thread_.joinable() && !done_.load(); }
  // The record (or error) of the oldest save not yet collected, blocking until it is written.
  // kFailedPrecondition when every started save has been collected.
  Result<ShardRecord> wait();

 private:
  void join_current();

  ShardWriteOptions options_;
  std::thread thread_;
  std::atomic<bool> done_{true};
  std::optional<Result<ShardRecord>> current_;  // written by thread_, read after join
  Snapshot written_;                            // thread_'s snapshot, handed back after join
  Snapshot spare_;                              // a finished save's snapshot, for reuse
  std::deque<Result<ShardRecord>> finished_;
};

}  // namespace ntp::checkpoint
