// Deterministic, platform-independent random numbers.
//
// std::uniform_*_distribution differ between standard libraries, so everything that must reproduce
// bit for bit (weight init, data order, simulated failures, property tests) draws from Rng.
// Rng is xoshiro256** seeded through SplitMix64; streams derived with `fork` are independent.
#pragma once

#include <cstdint>

namespace ntp {

// One SplitMix64 step: a strong 64-bit mix, also used to hash (seed, key) pairs.
constexpr std::uint64_t splitmix64(std::uint64_t x) {
  x += 0x9E3779B97F4A7C15ULL;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ULL;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBULL;
  return x ^ (x >> 31);
}

class Rng {
 public:
  explicit Rng(std::uint64_t seed);

  std::uint64_t next_u64();
  // Uniform in [0, 1) with 53 random bits.
  double uniform();
  // Uniform integer in [0, n); n > 0. Unbiased (rejection sampling).
  std::uint64_t below(std::uint64_t n);
  // Standard normal (Box-Muller; no cached second value, so the stream stays stateless per call).
  double normal();
  // Exponential with the given rate (events per unit time); rate > 0.
  double exponential(double rate);

  // An independent stream keyed by `key`, without advancing this one.
  Rng fork(std::uint64_t key) const;

 private:
  std::uint64_t s_[4];
};

}  // namespace ntp
