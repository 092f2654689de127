// What a writer reports about the pieces it stored, and how those reports travel.
//
// Each rank's shard writer returns a ShardRecord; the trainer gathers every rank's record to one
// rank (as strings: shard_record_to_string / shard_record_from_string) and passes them all to
// commit_checkpoint (checkpoint_dir.h), which writes the manifest. The JSON of one piece is the
// manifest's piece entry (docs/checkpoint.md).
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "checkpoint/piece.h"
#include "core/status.h"

namespace ntp::checkpoint {

inline constexpr int64_t kDefaultChunkBytes = int64_t{1} << 20;
inline constexpr int64_t kMaxChunkBytes = int64_t{64} << 20;
inline constexpr uint64_t kMaxDim = uint64_t{1} << 40;  // largest dimension a record may hold
inline constexpr size_t kMaxRank = 16;

struct PieceRecord {
  PieceSpec spec;
  std::string file;  // shard file name inside the step directory
  std::string key;   // tensor name inside that safetensors file
  int64_t chunk_bytes = kDefaultChunkBytes;
  std::vector<uint32_t> crcs;  // CRC-32C of each chunk_bytes chunk of the piece's data (last short)
};

struct ShardRecord {
  std::string writer;  // writer id: 1-64 characters of [A-Za-z0-9_-]
  std::string file;    // "shard_<writer>.safetensors"
  std::vector<PieceRecord> pieces;
};

// kInvalidArgument unless `writer` is 1-64 characters of [A-Za-z0-9_-].
Status validate_writer_id(std::string_view writer);
// "shard_<writer>.safetensors".
std::string shard_file_name(std::string_view writer);

// Chunks of a piece of `bytes` bytes: ceil(bytes / chunk_bytes).
int64_t chunk_count(int64_t bytes, int64_t chunk_bytes);

nlohmann::json piece_record_to_json(const PieceRecord& record);
// Strict: every field present with the right type, index runs in range and matching the local
// shape, chunk size in [4, 64 MiB] and a multiple of 4, one CRC per chunk. kInvalidArgument
// naming the field otherwise.
Result<PieceRecord> piece_record_from_json(const nlohmann::json& j);

// A piece entry's fields with their JSON types checked, not yet their values: what both
// piece_record_from_json and the manifest's fast scanner of its own canonical text
// (manifest_scan.h) extract, so that finish_piece makes both accept exactly the same records.
struct RawRun {
  enum Kind { kId, kRun, kBad } kind = kBad;  // a bare slice id, a [begin, end) pair, or neither
  uint64_t begin = 0, end = 0;
};
struct PieceFields {
  PieceRecord record;  // tensor, kind, file, key, logical_shape, axis, chunk_bytes (in range)
  std::vector<int64_t> shape;
  bool crcs_is_array = false;
  std::vector<int64_t> crcs;  // -1: an entry that is not a 32-bit unsigned integer
  bool index_is_array = false;
  std::vector<RawRun> index;
};
// The rest of piece_record_from_json's checks, in its order, and the record.
Result<PieceRecord> finish_piece(PieceFields fields);

std::string shard_record_to_string(const ShardRecord& record);
Result<ShardRecord> shard_record_from_string(std::string_view text);

}  // namespace ntp::checkpoint
