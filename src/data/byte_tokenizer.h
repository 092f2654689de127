// Byte-level tokenizer: token id = byte value (0..255). Lossless for any byte string, including
// UTF-8. The model's vocabulary may be padded past 256 (for example to a multiple of a TP degree);
// padded ids never occur in encoded text.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace ntp::data {

inline constexpr int64_t kByteVocabSize = 256;

std::vector<uint16_t> encode_bytes(std::string_view text);
// kInvalidArgument naming the first id >= 256.
Result<std::string> decode_bytes(std::span<const uint16_t> tokens);
// Smallest multiple of `multiple` (>= 1) that holds the 256 byte ids.
int64_t padded_vocab_size(int64_t multiple);

}  // namespace ntp::data
