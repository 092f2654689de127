// The safetensors file format (https://github.com/huggingface/safetensors), as ntp writes and
// reads it:
//   8 bytes      N, little-endian uint64: the length of the JSON header
//   N bytes      JSON object: {"<tensor name>": {"dtype": "F32", "shape": [..], "data_offsets":
//                [begin, end]}, ..., "__metadata__": {"<key>": "<string>", ...}} (metadata
//                optional), padded with spaces to a multiple of 8 bytes
//   the rest     the data section; offsets are relative to its start
// Data is little-endian, row-major. The reader is strict: N within the file and at most 100 MiB,
// well-formed JSON, known dtypes, non-negative shapes, byte length == numel * dtype size, tensors
// laid out in order without overlaps or holes, and the data section exactly filling the file.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "checkpoint/atomic_file.h"
#include "core/status.h"

namespace ntp::checkpoint {

inline constexpr uint64_t kMaxSafetensorsHeaderBytes = 100ull << 20;

struct SafetensorsEntry {
  std::string name;
  std::string dtype;
  std::vector<int64_t> shape;
  uint64_t begin = 0;  // byte offsets in the data section, [begin, end)
  uint64_t end = 0;
};

struct SafetensorsHeader {
  uint64_t header_bytes = 0;              // N; the data section starts at 8 + N
  std::vector<SafetensorsEntry> entries;  // by data offset
  std::map<std::string, std::string> metadata;

  // Positions in `entries` sorted by name (parse_safetensors_header fills it; when it does not
  // match `entries`, find searches linearly).
  std::vector<uint32_t> by_name;

  uint64_t data_start() const { return 8 + header_bytes; }
  // Null when there is no tensor of that name.
  const SafetensorsEntry* find(std::string_view name) const;
};

// Bytes per element of a safetensors dtype name ("F32" -> 4), 0 for unknown names.
int dtype_size(std::string_view dtype);

// Parses and validates the header at the start of a file of `file_size` bytes; `prefix` holds
// the file's first bytes (at least 8 + N of them, or the whole file if shorter). Errors are
// kInvalidArgument saying what is wrong ("safetensors header: ...").
Result<SafetensorsHeader> parse_safetensors_header(std::string_view prefix, uint64_t file_size);

// A float32 tensor to be written: name and shape; its data is given to SafetensorsWriter in order.
struct SafetensorsTensor {
  std::string name;
  std::vector<int64_t> shape;
};

// Writes one safetensors file atomically (AtomicFile): create() writes the header, then the data
// of every tensor is appended in declaration order with write(), then commit().
class SafetensorsWriter {
 public:
  // kInvalidArgument for duplicate or empty names, negative dims, or "__metadata__" as a name.
  static Result<SafetensorsWriter> create(const std::filesystem::path& path,
                                          const std::vector<SafetensorsTensor>& tensors,
                                          const std::map<std::string, std::string>& metadata = {});
  // Appends data bytes; the total must not exceed the declared tensors' bytes.
  Status write(std::span<const std::byte> data);
  Status write(std::span<const float> data) { return write(std::as_bytes(data)); }
  // kFailedPrecondition unless exactly all declared bytes were written; then AtomicFile::commit.
  Status commit(bool sync_directory = true);
  // Absolute file offset of the data section.
  uint64_t data_start() const { return data_start_; }

 private:
  SafetensorsWriter(AtomicFile file, uint64_t data_start, uint64_t data_bytes)
      : file_(std::move(file)), data_start_(data_start), data_bytes_(data_bytes) {}
  AtomicFile file_;
  uint64_t data_start_ = 0;
  uint64_t data_bytes_ = 0;
  uint64_t written_ = 0;
};

// An open safetensors file with a validated header, read with pread (thread-safe reads).
class SafetensorsFile {
 public:
  // kNotFound when missing; kInvalidArgument "<path>: safetensors header: ..." when malformed.
  static Result<SafetensorsFile> open(const std::filesystem::path& path);

  SafetensorsFile(SafetensorsFile&& other) noexcept;
  SafetensorsFile& operator=(SafetensorsFile&& other) noexcept;
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;
  ~SafetensorsFile();

  const SafetensorsHeader& header() const { return header_; }
  const std::filesystem::path& path() const { return path_; }
  // Reads out.size() bytes at `offset` of the data section; kInvalidArgument past its end.
  Status read(uint64_t offset, std::span<std::byte> out) const;

 private:
  SafetensorsFile(std::filesystem::path path, int fd, SafetensorsHeader header);
  std::filesystem::path path_;
  int fd_ = -1;
  SafetensorsHeader header_;
  uint64_t file_size_ = 0;
};

}  // namespace ntp::checkpoint
