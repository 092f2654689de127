#include "data/byte_tokenizer.h"

namespace ntp::data {

std::vector<uint16_t> encode_bytes(std::string_view text) {
  std::vector<uint16_t> out(text.size());
  for (size_t i = 0; i < text.size(); ++i) out[i] = static_cast<unsigned char>(text[i]);
  return out;
}

Result<std::string> decode_bytes(std::span<const uint16_t> tokens) {
  std::string out(tokens.size(), '\0');
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (tokens[i] >= kByteVocabSize) {
      return invalid_argument("token " + std::to_string(tokens[i]) + " at position " +
                              std::to_string(i) + " is not a byte (ids 0..255 decode)");
    }
    out[i] = static_cast<char>(static_cast<unsigned char>(tokens[i]));
  }
  return out;
}

int64_t padded_vocab_size(int64_t multiple) {
  NTP_CHECK(multiple >= 1);
  return (kByteVocabSize + multiple - 1) / multiple * multiple;
}

}  // namespace ntp::data
