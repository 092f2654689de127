#include "data/token_file.h"

#include <bit>
#include <cstring>
#include <fstream>

namespace ntp::data {

static_assert(std::endian::native == std::endian::little,
              "token files are little-endian; add byte swapping for big-endian hosts");

Status write_token_file(const std::string& path, std::span<const uint16_t> tokens) {
  std::vector<int32_t> header(kTokenFileHeaderInts, 0);
  header[0] = kTokenFileMagic;
  header[1] = kTokenFileVersion;
  if (tokens.size() > static_cast<size_t>(INT32_MAX)) {
    return invalid_argument("a token file holds at most 2^31-1 tokens; split the corpus");
  }
  header[2] = static_cast<int32_t>(tokens.size());
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) return unavailable("cannot open " + path + " for writing");
  out.write(reinterpret_cast<const char*>(header.data()),
            static_cast<std::streamsize>(header.size() * sizeof(int32_t)));
  out.write(reinterpret_cast<const char*>(tokens.data()),
            static_cast<std::streamsize>(tokens.size() * sizeof(uint16_t)));
  out.close();
  if (!out) return unavailable("writing " + path + " failed (disk full?)");
  return ok_status();
}

Result<std::vector<uint16_t>> read_token_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  if (!in) return not_found("token file " + path + " does not exist or is unreadable");
  const auto file_size = static_cast<int64_t>(in.tellg());
  in.seekg(0);
  constexpr int64_t kHeaderBytes = kTokenFileHeaderInts * 4;
  if (file_size < kHeaderBytes) {
    return invalid_argument(path + " is " + std::to_string(file_size) +
                            " bytes, shorter than the 1024-byte .bin header");
  }
  std::vector<int32_t> header(kTokenFileHeaderInts);
  in.read(reinterpret_cast<char*>(header.data()), kHeaderBytes);
  if (header[0] != kTokenFileMagic) {
    return invalid_argument(path + ": header magic " + std::to_string(header[0]) + " is not " +
                            std::to_string(kTokenFileMagic) + " (not an llm.c .bin token file)");
  }
  if (header[1] != kTokenFileVersion) {
    return invalid_argument(path + ": version " + std::to_string(header[1]) +
                            " is unsupported; only version 1 (uint16 tokens) is read");
  }
  const int64_t count = header[2];
  if (count < 0 || kHeaderBytes + count * 2 != file_size) {
    return invalid_argument(path + ": header says " + std::to_string(count) +
                            " tokens but the body has " +
                            std::to_string((file_size - kHeaderBytes) / 2));
  }
  std::vector<uint16_t> tokens(static_cast<size_t>(count));
  in.read(reinterpret_cast<char*>(tokens.data()), count * 2);
  if (!in) return unavailable("reading " + path + " failed");
  return tokens;
}

}  // namespace ntp::data
