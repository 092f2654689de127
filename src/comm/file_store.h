// FileStore: a Store in a directory shared by the processes of one machine (or a shared FS).
//
// Layout: DIR/<run_id>/<escaped key>. set() writes a temporary file and renames it, so readers
// see either the old or the new value, never a torn one; add() serializes through flock(2) on a
// per-key lock file. wait() polls with a short backoff (<= 2 ms between looks). erase() leaves a
// counter's lock file (empty): removing it could let two concurrent add()s lock different files.
#pragma once

#include <string>

#include "comm/store.h"

namespace ntp::comm {

class FileStore : public Store {
 public:
  // Creates DIR/<run_id> if needed. kUnavailable when the directory cannot be created.
  static Result<std::shared_ptr<FileStore>> open(const std::string& dir, const std::string& run_id);

  Status set(const std::string& key, const std::string& value) override;
  Result<std::string> get(const std::string& key) override;
  Result<bool> exists(const std::string& key) override;
  Result<std::int64_t> add(const std::string& key, std::int64_t delta) override;
  // Writes a temporary file and link(2)s it to the key's path, which fails when the path exists.
  Result<bool> claim(const std::string& key, const std::string& value) override;
  Status erase(const std::vector<std::string>& keys) override;
  std::string describe() const override;

 private:
  explicit FileStore(std::string root, std::string description)
      : root_(std::move(root)), description_(std::move(description)) {}
  std::string path_of(const std::string& key) const;

  std::string root_;
  std::string description_;
};

}  // namespace ntp::comm
