// A fresh directory under the system temp dir, removed with everything in it on destruction.
#pragma once

#include <unistd.h>

#include <filesystem>
#include <string>

#include "core/non_copyable.h"

namespace ntp::checkpoint::testing {

class TempDir : NonCopyable {
 public:
  TempDir() {
    path_ = std::filesystem::temp_directory_path() /
            ("ntp_ckpt_test_" + std::to_string(::getpid()) + "_" + std::to_string(counter_++));
    std::filesystem::remove_all(path_);
    std::filesystem::create_directories(path_);
  }
  ~TempDir() { std::filesystem::remove_all(path_); }
  const std::filesystem::path& path() const { return path_; }

 private:
  static inline int counter_ = 0;
  std::filesystem::path path_;
};

}  // namespace ntp::checkpoint::testing
