#include "checkpoint/crc32c.h"

#include <array>
#include <cstring>

#if defined(__x86_64__)
#include <nmmintrin.h>
#endif

namespace ntp::checkpoint {
namespace {

constexpr uint32_t kPolynomial = 0x82F63B78u;  // reflected Castagnoli polynomial

// Slicing-by-8 tables: table[k][b] is the CRC of byte b followed by k zero bytes.
using Tables = std::array<std::array<uint32_t, 256>, 8>;

constexpr Tables make_tables() {
  Tables t{};
  for (uint32_t b = 0; b < 256; ++b) {
    uint32_t crc = b;
    for (int k = 0; k < 8; ++k) crc = (crc >> 1) ^ ((crc & 1u) ? kPolynomial : 0u);
    t[0][b] = crc;
  }
  for (size_t k = 1; k < 8; ++k) {
    for (size_t b = 0; b < 256; ++b) t[k][b] = (t[k - 1][b] >> 8) ^ t[0][t[k - 1][b] & 0xFFu];
  }
  return t;
}

constexpr Tables kTables = make_tables();

// `crc` here is the raw register (already xored with 0xFFFFFFFF).
uint32_t update_portable(uint32_t crc, const unsigned char* p, size_t n) {
  while (n >= 8) {
    uint64_t word;
    std::memcpy(&word, p, 8);  // little-endian host assumed (x86-64, aarch64)
    const uint32_t lo = static_cast<uint32_t>(word) ^ crc;
    const uint32_t hi = static_cast<uint32_t>(word >> 32);
    crc = kTables[7][lo & 0xFF] ^ kTables[6][(lo >> 8) & 0xFF] ^ kTables[5][(lo >> 16) & 0xFF] ^
          kTables[4][lo >> 24] ^ kTables[3][hi & 0xFF] ^ kTables[2][(hi >> 8) & 0xFF] ^
          kTables[1][(hi >> 16) & 0xFF] ^ kTables[0][hi >> 24];
    p += 8;
    n -= 8;
  }
  while (n-- > 0) crc = (crc >> 8) ^ kTables[0][(crc ^ *p++) & 0xFFu];
  return crc;
}

// GF(2) polynomial arithmetic modulo the CRC polynomial (reflected), for combining CRCs:
// crc(A || B) = multiply(crc(A), x^(8 |B|)) ^ crc(B) (zlib's crc32_combine, Mark Adler).
uint32_t multiply_mod(uint32_t a, uint32_t b) {
  uint32_t m = 1u << 31, p = 0;
  for (;;) {
    if (a & m) {
      p ^= b;
      if ((a & (m - 1)) == 0) break;
    }
    m >>= 1;
    b = (b & 1) ? (b >> 1) ^ kPolynomial : b >> 1;
  }
  return p;
}

// x^(2^k) mod P for k = 0..31.
std::array<uint32_t, 32> make_powers() {
  std::array<uint32_t, 32> t{};
  uint32_t p = 1u << 30;  // x^1
  t[0] = p;
  for (size_t k = 1; k < 32; ++k) t[k] = p = multiply_mod(p, p);
  return t;
}

// x^(8 n) mod P.
uint32_t x8n_mod(uint64_t n) {
  static const std::array<uint32_t, 32> powers = make_powers();
  uint32_t p = 1u << 31;  // x^0
  unsigned k = 3;
  while (n != 0) {
    if (n & 1) p = multiply_mod(powers[k & 31], p);
    n >>= 1;
    ++k;
  }
  return p;
}

// crc of A || B from crc(A), crc(B) and |B|.
uint32_t combine(uint32_t crc_a, uint32_t crc_b, uint64_t len_b) {
  return multiply_mod(x8n_mod(len_b), crc_a) ^ crc_b;
}

#if defined(__x86_64__)
// `crc` is the raw register. The instruction has a latency of 3 cycles and a throughput of 1 per
// cycle, so long buffers run as three independent streams whose CRCs are then combined.
__attribute__((target("sse4.2"))) uint32_t update_hardware(uint32_t crc, const unsigned char* p,
                                                           size_t n) {
  constexpr size_t kThreeWayMin = 3 * 8192;
  if (n >= kThreeWayMin) {
    const size_t len = (n / 3) & ~size_t{7};
    uint64_t c1 = crc, c2 = 0xFFFFFFFFu, c3 = 0xFFFFFFFFu;
    const unsigned char* p2 = p + len;
    const unsigned char* p3 = p + 2 * len;
    for (size_t i = 0; i < len; i += 8) {
      uint64_t w1, w2, w3;
      std::memcpy(&w1, p + i, 8);
      std::memcpy(&w2, p2 + i, 8);
      std::memcpy(&w3, p3 + i, 8);
      c1 = _mm_crc32_u64(c1, w1);
      c2 = _mm_crc32_u64(c2, w2);
      c3 = _mm_crc32_u64(c3, w3);
    }
    // Finalized CRCs of the three parts (the first continues `crc`), combined.
    const uint32_t whole =
        combine(combine(~static_cast<uint32_t>(c1), ~static_cast<uint32_t>(c2), len),
                ~static_cast<uint32_t>(c3), len);
    crc = ~whole;
    p += 3 * len;
    n -= 3 * len;
  }
  uint64_t c = crc;
  while (n >= 8) {
    uint64_t word;
    std::memcpy(&word, p, 8);
    c = _mm_crc32_u64(c, word);
    p += 8;
    n -= 8;
  }
  auto c32 = static_cast<uint32_t>(c);
  while (n-- > 0) c32 = _mm_crc32_u8(c32, *p++);
  return c32;
}

bool detect_hardware() {
  __builtin_cpu_init();
  return __builtin_cpu_supports("sse4.2");
}
#endif

}  // namespace

bool crc32c_hardware_available() {
#if defined(__x86_64__)
  static const bool available = detect_hardware();
  return available;
#else
  return false;
#endif
}

uint32_t crc32c_extend_portable(uint32_t crc, std::span<const std::byte> data) {
  const auto* p = reinterpret_cast<const unsigned char*>(data.data());
  return ~update_portable(~crc, p, data.size());
}

uint32_t crc32c_extend(uint32_t crc, std::span<const std::byte> data) {
#if defined(__x86_64__)
  if (crc32c_hardware_available()) {
    const auto* p = reinterpret_cast<const unsigned char*>(data.data());
    return ~update_hardware(~crc, p, data.size());
  }
#endif
  return crc32c_extend_portable(crc, data);
}

uint32_t crc32c(std::span<const std::byte> data) { return crc32c_extend(0, data); }

}  // namespace ntp::checkpoint
