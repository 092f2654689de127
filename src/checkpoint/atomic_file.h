// Atomic file creation: a file appears under its final name complete or not at all.
//
// AtomicFile writes to a temporary file in the destination's directory (named
// ".tmp.<final name>.<pid>.<n>", so that leftovers of a crash are recognisable), and commit()
// fsyncs it, renames it over the final name and fsyncs the directory. A crash at any point leaves
// either the old file (or none) or the complete new one, plus at worst a stale temporary file.
// Dropping an AtomicFile without commit() removes the temporary file.
#pragma once

#include <cstddef>
#include <filesystem>
#include <span>
#include <string>
#include <string_view>

#include "core/status.h"

namespace ntp::checkpoint {

class AtomicFile {
 public:
  // kInternal (naming the path and errno text) when the temporary file cannot be created.
  static Result<AtomicFile> create(const std::filesystem::path& final_path);

  AtomicFile(AtomicFile&& other) noexcept;
  AtomicFile& operator=(AtomicFile&& other) noexcept;
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;
  ~AtomicFile();

  // Appends all of `data` (retrying short writes).
  Status write(std::span<const std::byte> data);
  Status write(std::string_view text);
  // fsync, rename over the final path, then (unless `sync_directory` is false) fsync the
  // directory, which makes the rename durable. A caller that passes false must fsync the
  // directory itself before relying on the file (write_shard does: commit_checkpoint syncs the
  // step directory once for all shards). The object is spent afterwards.
  Status commit(bool sync_directory = true);

  const std::filesystem::path& final_path() const { return final_path_; }

 private:
  AtomicFile(std::filesystem::path final_path, std::filesystem::path temp_path, int fd);
  void discard();

  std::filesystem::path final_path_;
  std::filesystem::path temp_path_;
  int fd_ = -1;
};

// True for the names AtomicFile gives its temporary files.
bool is_temporary_name(std::string_view file_name);

// Writes `content` to `path` atomically (AtomicFile).
Status write_file_atomically(const std::filesystem::path& path, std::string_view content);

// fsync of a directory, so that renames and creations inside it are durable.
Status fsync_directory(const std::filesystem::path& dir);

// "<what> <path>: <strerror(errno)>" as kInternal.
Status errno_status(std::string_view what, const std::filesystem::path& path);

}  // namespace ntp::checkpoint
