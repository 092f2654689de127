#include "data/batcher.h"

#include <string>
#include <utility>

#include "core/rng.h"

namespace ntp::data {

Result<Batcher> Batcher::create(std::shared_ptr<const std::vector<uint16_t>> tokens,
                                int64_t global_batch, int64_t seq_len, uint64_t seed) {
  if (global_batch <= 0 || seq_len <= 0) {
    return invalid_argument("global batch " + std::to_string(global_batch) + " and seq_len " +
                            std::to_string(seq_len) + " must both be >= 1");
  }
  if (!tokens || static_cast<int64_t>(tokens->size()) < seq_len + 1) {
    return invalid_argument(
        "the token stream needs at least seq_len + 1 = " + std::to_string(seq_len + 1) + " tokens");
  }
  return Batcher(std::move(tokens), global_batch, seq_len, seed);
}

int64_t Batcher::offset(int64_t step, int64_t sample) const {
  const auto windows = static_cast<uint64_t>(static_cast<int64_t>(tokens_->size()) - seq_len_);
  Rng rng = Rng(seed_).fork(static_cast<uint64_t>(step)).fork(static_cast<uint64_t>(sample));
  return static_cast<int64_t>(rng.below(windows));
}

Result<Batch> Batcher::get(int64_t step, int64_t begin, int64_t count) const {
  if (step < 0 || begin < 0 || count < 0 || begin + count > global_batch_) {
    return invalid_argument("samples [" + std::to_string(begin) + ", " +
                            std::to_string(begin + count) + ") of step " + std::to_string(step) +
                            " are outside the global batch of " + std::to_string(global_batch_));
  }
  Batch batch;
  batch.samples = count;
  batch.seq_len = seq_len_;
  batch.tokens.resize(static_cast<size_t>(count * seq_len_));
  batch.targets.resize(static_cast<size_t>(count * seq_len_));
  for (int64_t i = 0; i < count; ++i) {
    const int64_t start = offset(step, begin + i);
    for (int64_t j = 0; j < seq_len_; ++j) {
      batch.tokens[static_cast<size_t>(i * seq_len_ + j)] =
          (*tokens_)[static_cast<size_t>(start + j)];
      batch.targets[static_cast<size_t>(i * seq_len_ + j)] =
          (*tokens_)[static_cast<size_t>(start + j + 1)];
    }
  }
  return batch;
}

}  // namespace ntp::data
