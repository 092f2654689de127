// Token shard files in the llm.c / nanoGPT `.bin` format.
//
// Header: 256 little-endian int32 values (1024 bytes):
//   header[0] = 20240520 (magic), header[1] = 1 (version: uint16 tokens),
//   header[2] = number of tokens; the rest are 0.
// Body: that many little-endian uint16 token ids, nothing after them.
// This is what llm.c's dev/data/*.py write for GPT-2 shards, so such shards can be read here.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "core/status.h"

namespace ntp::data {

inline constexpr int32_t kTokenFileMagic = 20240520;
inline constexpr int32_t kTokenFileVersion = 1;
inline constexpr int64_t kTokenFileHeaderInts = 256;

// kUnavailable when the file cannot be written.
Status write_token_file(const std::string& path, std::span<const uint16_t> tokens);
// kNotFound when missing; kInvalidArgument (naming the field and the expected value) when the
// magic, version or token count does not match the file.
Result<std::vector<uint16_t>> read_token_file(const std::string& path);

}  // namespace ntp::data
