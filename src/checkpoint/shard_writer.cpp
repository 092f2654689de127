#include "checkpoint/shard_writer.h"

#include <algorithm>
#include <cstring>
#include <map>

#include "checkpoint/crc32c.h"
#include "checkpoint/safetensors.h"

namespace ntp::checkpoint {
namespace {

Status check_pieces(std::span<const PieceView> pieces) {
  for (const PieceView& p : pieces) {
    NTP_RETURN_IF_ERROR(validate_piece_spec(p.spec));
    const int64_t numel = local_numel(p.spec);
    if (p.row_floats == 0) {
      if (static_cast<int64_t>(p.data.size()) != numel) {
        return invalid_argument("piece " + piece_name(p.spec) + ": " +
                                std::to_string(p.data.size()) +
                                " floats given, local shape holds " + std::to_string(numel));
      }
      continue;
    }
    const int64_t rows = numel / p.row_floats;
    if (p.row_floats < 0 || p.row_stride < p.row_floats || rows * p.row_floats != numel ||
        static_cast<int64_t>(p.data.size()) !=
            (rows > 0 ? (rows - 1) * p.row_stride + p.row_floats : 0)) {
      return invalid_argument(
          "piece " + piece_name(p.spec) + ": rows of " + std::to_string(p.row_floats) +
          " floats every " + std::to_string(p.row_stride) + " in " + std::to_string(p.data.size()) +
          " floats do not hold its " + std::to_string(numel));
    }
  }
  return ok_status();
}

// Copies a (checked) piece's data to `out` (local_numel floats).
void copy_data(const PieceView& p, float* out) {
  if (p.data.empty()) return;
  if (p.row_floats == 0) {
    std::memcpy(out, p.data.data(), p.data.size_bytes());
    return;
  }
  const int64_t rows = local_numel(p.spec) / p.row_floats;
  for (int64_t r = 0; r < rows; ++r) {
    std::memcpy(out + r * p.row_floats, p.data.data() + r * p.row_stride,
                static_cast<size_t>(p.row_floats) * sizeof(float));
  }
}

std::vector<uint32_t> chunk_crcs(std::span<const float> data, int64_t chunk_bytes) {
  const std::span<const std::byte> bytes = std::as_bytes(data);
  std::vector<uint32_t> crcs;
  for (size_t off = 0; off < bytes.size(); off += static_cast<size_t>(chunk_bytes)) {
    crcs.push_back(crc32c(bytes.subspan(
        off, std::min<size_t>(static_cast<size_t>(chunk_bytes), bytes.size() - off))));
  }
  return crcs;
}

}  // namespace

Result<ShardRecord> write_shard(const std::filesystem::path& step_dir, std::string_view writer,
                                std::span<const PieceView> pieces,
                                const ShardWriteOptions& options) {
  NTP_RETURN_IF_ERROR(validate_writer_id(writer));
  if (options.chunk_bytes < 4 || options.chunk_bytes > kMaxChunkBytes ||
      options.chunk_bytes % 4 != 0) {
    return invalid_argument("chunk_bytes " + std::to_string(options.chunk_bytes) +
                            " must be a multiple of 4 in [4, 64 MiB]");
  }
  NTP_RETURN_IF_ERROR(check_pieces(pieces));
  ShardRecord record;
  record.writer = std::string(writer);
  record.file = shard_file_name(writer);
  std::vector<SafetensorsTensor> tensors;
  std::map<std::string, int> uses;
  for (const PieceView& p : pieces) {
    std::string key = p.spec.tensor + ":" + p.spec.kind;
    const int n = ++uses[key];
    if (n > 1) key += ":" + std::to_string(n);
    tensors.push_back({key, local_shape(p.spec)});
    record.pieces.push_back({p.spec, record.file, key, options.chunk_bytes, {}});
  }
  NTP_ASSIGN_OR_RETURN(
      SafetensorsWriter file,
      SafetensorsWriter::create(step_dir / record.file, tensors,
                                {{"format", "ntp-checkpoint-shard"}, {"writer", record.writer}}));
  std::vector<float> gathered;  // a strided piece's data, contiguous
  for (size_t i = 0; i < pieces.size(); ++i) {
    if (options.before_piece) options.before_piece(i);
    std::span<const float> data = pieces[i].data;
    if (pieces[i].row_floats != 0) {
      gathered.resize(static_cast<size_t>(local_numel(pieces[i].spec)));
      copy_data(pieces[i], gathered.data());
      data = gathered;
    }
    record.pieces[i].crcs = chunk_crcs(data, options.chunk_bytes);
    NTP_RETURN_IF_ERROR(file.write(data));
  }
  // The step directory is fsynced once for every shard by commit_checkpoint, before the manifest.
  NTP_RETURN_IF_ERROR(file.commit(/*sync_directory=*/false));
  return record;
}

Result<Snapshot> Snapshot::copy_of(std::span<const PieceView> pieces, Snapshot recycled) {
  NTP_RETURN_IF_ERROR(check_pieces(pieces));
  Snapshot s;
  for (const PieceView& p : pieces) {
    s.specs_.push_back(p.spec);
    s.offsets_.push_back(s.floats_);
    s.floats_ += static_cast<size_t>(local_numel(p.spec));
  }
  if (recycled.data_ != nullptr && recycled.capacity_ >= s.floats_) {
    s.data_ = std::move(recycled.data_);
    s.capacity_ = recycled.capacity_;
  } else {
    s.capacity_ = std::max<size_t>(s.floats_, 1);
    s.data_ = std::make_unique_for_overwrite<float[]>(s.capacity_);
  }
  for (size_t i = 0; i < pieces.size(); ++i) copy_data(pieces[i], s.data_.get() + s.offsets_[i]);
  return s;
}

Result<Snapshot> Snapshot::copy_of(std::span<const PieceView> pieces) {
  return copy_of(pieces, Snapshot());
}

std::vector<PieceView> Snapshot::views() const {
  std::vector<PieceView> out;
  for (size_t i = 0; i < specs_.size(); ++i) {
    const size_t end = i + 1 < specs_.size() ? offsets_[i + 1] : floats_;
    out.push_back(
        {specs_[i], std::span<const float>(data_.get() + offsets_[i], end - offsets_[i])});
  }
  return out;
}

}  // namespace ntp::checkpoint
