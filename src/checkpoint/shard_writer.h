// Writing one rank's shard file: the pieces a rank holds, as one safetensors file
// step_dir/shard_<writer>.safetensors (atomic), plus the record that describes them.
//
// Every writing rank calls write_shard (or AsyncShardWriter) with its own writer id after
// prepare_step_dir (checkpoint_dir.h); the records then go to commit_checkpoint.
#pragma once

#include <cstddef>
#include <filesystem>
#include <functional>
#include <memory>
#include <span>
#include <string_view>
#include <vector>

#include "checkpoint/piece.h"
#include "checkpoint/records.h"
#include "core/status.h"

namespace ntp::checkpoint {

// A piece and its data (local shape, row-major), borrowed.
struct PieceView {
  PieceSpec spec;
  std::span<const float> data;
  // 0: `data` is the piece's data. Else the data is local_numel / row_floats rows of row_floats
  // floats, row r starting at data[r * row_stride] (a block of columns of a larger row-major
  // array, e.g. some of a rank's units of a tensor viewed as [outer, units, inner]); `data` ends
  // with the last row.
  int64_t row_floats = 0;
  int64_t row_stride = 0;
};

struct ShardWriteOptions {
  int64_t chunk_bytes = kDefaultChunkBytes;  // CRC granularity; multiple of 4, <= 64 MiB
  // Test hook: called before each piece's data is written (index into the pieces). The crash
  // tests use it to slow a save down so that it can be killed in the middle.
  std::function<void(size_t piece)> before_piece;
};

// Writes `pieces` to step_dir/shard_<writer>.safetensors atomically (file fsynced and renamed;
// the directory entry is made durable by commit_checkpoint) and returns their record.
// Keys inside the file are "<tensor>:<kind>" (":2", ":3"... appended if a writer stores two
// pieces of one (tensor, kind)). kInvalidArgument for a bad writer id, piece spec or data size.
Result<ShardRecord> write_shard(const std::filesystem::path& step_dir, std::string_view writer,
                                std::span<const PieceView> pieces,
                                const ShardWriteOptions& options = {});

// An owned copy of pieces' data, taken on the training thread so that training may modify the
// originals while the copy is written (AsyncShardWriter). One allocation, one memcpy per piece.
class Snapshot {
 public:
  Snapshot() = default;
  // Copies every piece's data; kInvalidArgument when a data size does not match its spec.
  // `recycled` (an earlier snapshot, now unused) lends its allocation when it is large enough,
  // which spares the page faults of fresh memory (AsyncShardWriter::snapshot does this).
  static Result<Snapshot> copy_of(std::span<const PieceView> pieces, Snapshot recycled);
  static Result<Snapshot> copy_of(std::span<const PieceView> pieces);

  std::vector<PieceView> views() const;
  int64_t bytes() const { return static_cast<int64_t>(floats_ * sizeof(float)); }

 private:
  std::vector<PieceSpec> specs_;
  std::vector<size_t> offsets_;  // into data_, one per piece
  std::unique_ptr<float[]> data_;
  size_t floats_ = 0;
  size_t capacity_ = 0;  // floats allocated in data_
};

}  // namespace ntp::checkpoint
