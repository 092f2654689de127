// Deterministic, seedable batching over one token stream.
//
// Global step s has `global_batch` samples. Sample i is the window of seq_len + 1 tokens starting
// at offset(s, i) = Rng(seed).fork(s).fork(i).below(num_tokens - seq_len): inputs are its first
// seq_len tokens, targets the last seq_len (next-token prediction). A sample depends only on
// (seed, s, i), so any DP split of the global batch (a rank takes samples [begin, begin + count))
// and any TP layout reproduce the same global batch exactly.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "core/status.h"

namespace ntp::data {

struct Batch {
  int64_t samples = 0;
  int64_t seq_len = 0;
  std::vector<int32_t> tokens;   // [samples, seq_len]
  std::vector<int32_t> targets;  // [samples, seq_len]
};

class Batcher {
 public:
  // kInvalidArgument when the stream is shorter than seq_len + 1 or sizes are not positive.
  static Result<Batcher> create(std::shared_ptr<const std::vector<uint16_t>> tokens,
                                int64_t global_batch, int64_t seq_len, uint64_t seed);

  int64_t global_batch() const { return global_batch_; }
  int64_t seq_len() const { return seq_len_; }
  // Start offset of sample i of step s in the token stream.
  int64_t offset(int64_t step, int64_t sample) const;
  // Samples [begin, begin + count) of step `step`; kInvalidArgument when outside the batch.
  Result<Batch> get(int64_t step, int64_t begin, int64_t count) const;
  Result<Batch> get(int64_t step) const { return get(step, 0, global_batch_); }

 private:
  Batcher(std::shared_ptr<const std::vector<uint16_t>> tokens, int64_t global_batch,
          int64_t seq_len, uint64_t seed)
      : tokens_(std::move(tokens)), global_batch_(global_batch), seq_len_(seq_len), seed_(seed) {}

  std::shared_ptr<const std::vector<uint16_t>> tokens_;
  int64_t global_batch_;
  int64_t seq_len_;
  uint64_t seed_;
};

}  // namespace ntp::data
