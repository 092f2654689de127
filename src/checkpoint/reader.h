// CheckpointReader: reads any piece of any tensor of a complete checkpoint, whatever layout it
// was written at, verifying the CRC-32C of every chunk it reads.
//
// A request is a PieceSpec: the tensor, the kind, and the slices wanted (whole, or `index` along
// any axis). read() fills one request's local shape from the stored pieces; read_all() fills many
// in one pass, reading and CRC-checking each stored chunk once however many requests want parts
// of it, then scattering to every destination:
//   - stored and requested along the same axis (or either whole): only the chunks holding the
//     needed slices are read, adjacent slices coalesced into one pread, straight into the
//     destination when one request wants a batch of chunks entirely (when the axis is not the
//     outermost and the wanted slices form thousands of short runs, the piece is read whole and
//     gathered row by row instead, the pieces of one tensor together, up to 256 MiB: each
//     destination row is written once while in cache);
//   - along different axes: every stored piece that overlaps is read in full, then scattered.
// A chunk is always read whole so that its checksum can be checked; a mismatch is kInvalidArgument
// naming the file, the tensor and the chunk.
#pragma once

#include <atomic>
#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <vector>

#include "checkpoint/manifest.h"
#include "checkpoint/safetensors.h"
#include "core/status.h"

namespace ntp::checkpoint {

class CheckpointReader {
 public:
  // `dir` is a step directory or a save directory (then `latest` is followed). Validates the
  // manifest (schema, coverage) and that every file exists with a header holding each piece as
  // F32 of its local shape. kInvalidArgument naming the file (and tensor) otherwise, and
  // "... is not a checkpoint" for a directory without manifest.json.
  static Result<CheckpointReader> open(const std::filesystem::path& dir);

  CheckpointReader(CheckpointReader&&) noexcept;
  CheckpointReader& operator=(CheckpointReader&&) noexcept;
  ~CheckpointReader();

  const Manifest& manifest() const { return manifest_; }
  const std::filesystem::path& step_dir() const { return step_dir_; }
  // True when the checkpoint holds (tensor, kind).
  bool has(const std::string& tensor, const std::string& kind) const;

  // Fills `out` (the request's local shape, row-major). kNotFound when the checkpoint has no
  // such (tensor, kind); kInvalidArgument for a bad request, a logical shape that differs from
  // the stored one, `out` of the wrong size, or a checksum mismatch.
  Status read(const PieceSpec& request, std::span<float> out) const;

  // One request of read_all: a piece and its destination (the piece's local shape, row-major).
  struct Request {
    PieceSpec spec;
    std::span<float> out;
  };
  // read() of every request, in one pass over the stored pieces they touch (see above). The
  // destinations must not overlap. On error, destinations may be partly written.
  Status read_all(std::span<const Request> requests) const;

  // Reads every chunk of every piece and checks its checksum.
  Status verify_all() const;

  // Bytes read from files and chunks verified so far (for tests and benchmarks).
  int64_t bytes_read() const { return stats_->bytes.load(); }
  int64_t chunks_verified() const { return stats_->chunks.load(); }

 private:
  struct Stats {
    std::atomic<int64_t> bytes{0};
    std::atomic<int64_t> chunks{0};
  };
  // A contiguous copy of `count` elements from a piece's data (from element `src`) to `dst`.
  struct Copy {
    int64_t src = 0;
    float* dst = nullptr;
    int64_t count = 0;
  };

 public:
  struct PiecePlan;  // (in reader.cpp)

 private:
  struct Job {
    const PieceSpec* spec;
    std::span<float> out;
  };
  CheckpointReader() = default;
  Status check_request(const PieceSpec& request, std::span<float> out,
                       const std::vector<const PieceRecord*>** pieces) const;
  // Adds what `request` needs from each of `pieces` to their plans.
  void plan_same_axis(const Job& job, int axis, const std::vector<const PieceRecord*>& pieces,
                      std::vector<PiecePlan>& plans) const;
  // Reads the chunks of `piece` that `copies` touch (sorted by src; they may overlap), verifies
  // them and copies. With `all_chunks`, every chunk is read and verified.
  // `buffer` is scratch memory, kept across calls.
  Status read_piece(const PieceRecord& piece, const std::vector<Copy>& copies,
                    std::vector<std::byte>& buffer, bool all_chunks = false) const;
  // Memory reused across pieces and passes (fresh memory would page-fault on every pass); a
  // pass that finds it in use by another thread takes its own.
  struct Scratch {
    std::mutex mutex;
    std::vector<std::byte> bytes;
    std::vector<float> floats;
  };
  // Reads the stored pieces of one (tensor, kind) once each and serves every request of their
  // plans.
  Status execute(const std::vector<const PiecePlan*>& group, Scratch& scratch) const;
  Status read_jobs(const std::vector<Job>& jobs) const;

  std::filesystem::path step_dir_;
  Manifest manifest_;
  std::map<std::string, SafetensorsFile> files_;
  std::map<std::pair<std::string, std::string>, std::vector<const PieceRecord*>> by_tensor_;
  std::unique_ptr<Stats> stats_ = std::make_unique<Stats>();
  std::unique_ptr<Scratch> scratch_ = std::make_unique<Scratch>();
};

}  // namespace ntp::checkpoint
