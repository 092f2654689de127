#include "checkpoint/async_shard_writer.h"

#include <utility>

namespace ntp::checkpoint {

AsyncShardWriter::~AsyncShardWriter() {
  if (thread_.joinable()) thread_.join();
}

void AsyncShardWriter::join_current() {
  if (!thread_.joinable()) return;
  thread_.join();
  finished_.push_back(std::move(*current_));
  current_.reset();
  spare_ = std::move(written_);
}

Result<Snapshot> AsyncShardWriter::snapshot(std::span<const PieceView> pieces) {
  if (thread_.joinable() && done_.load()) join_current();  // finished: its memory is free
  return Snapshot::copy_of(pieces, std::move(spare_));
}

void AsyncShardWriter::start(std::filesystem::path step_dir, std::string writer,
                             Snapshot snapshot) {
  join_current();
  done_.store(false);
  thread_ = std::thread([this, dir = std::move(step_dir), id = std::move(writer),
                         snap = std::move(snapshot)]() mutable {
    const std::vector<PieceView> views = snap.views();
    current_.emplace(write_shard(dir, id, views, options_));
    written_ = std::move(snap);
    done_.store(true);
  });
}

Result<ShardRecord> AsyncShardWriter::wait() {
  join_current();
  if (finished_.empty()) return failed_precondition("AsyncShardWriter::wait: no save to wait for");
  Result<ShardRecord> r = std::move(finished_.front());
  finished_.pop_front();
  return r;
}

}  // namespace ntp::checkpoint
