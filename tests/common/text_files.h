// Files and text of the end-to-end tests: a scratch directory, a file's whole text, and how often
// a line or word occurs in a log.
#pragma once

#include <stdlib.h>

#include <cstddef>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <system_error>

#include "core/non_copyable.h"

namespace ntp::testing {

// A fresh empty directory $TMPDIR/<prefix>-XXXXXX (/tmp without TMPDIR), removed with everything
// in it by the destructor.
class TempDir : NonCopyable {
 public:
  explicit TempDir(const std::string& prefix = "ntp-test") {
    const char* base = std::getenv("TMPDIR");
    std::string pattern = std::string(base != nullptr ? base : "/tmp") + "/" + prefix + "-XXXXXX";
    if (mkdtemp(pattern.data()) == nullptr) std::abort();
    path_ = pattern;
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// The whole text of `path`; empty when it cannot be read.
inline std::string read_file(const std::filesystem::path& path) {
  std::ifstream in(path);
  std::stringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

// How many times `needle` occurs in `text` (overlapping occurrences counted).
inline int count(const std::string& text, const std::string& needle) {
  int n = 0;
  for (std::size_t at = text.find(needle); at != std::string::npos;
       at = text.find(needle, at + 1)) {
    ++n;
  }
  return n;
}

}  // namespace ntp::testing
