// The demo corpus: English text from Debian's `fortunes` package (/usr/share/games/fortunes).
//
// Every regular file of the directory except the strfile indexes (*.dat), symlinks (*.u8) and the
// ASCII-art collections is read in name order (deterministic); fortune separators ("%" lines)
// become blank lines. About 2 MB of text on Debian 12.
#pragma once

#include <string>

#include "core/status.h"

namespace ntp::data {

inline constexpr const char* kDefaultFortunesDir = "/usr/share/games/fortunes";

// kNotFound (naming the package to install) when the directory is missing or holds no text.
Result<std::string> load_fortunes_text(const std::string& dir = kDefaultFortunesDir);

}  // namespace ntp::data
