// A short single-process training run on the real corpus (Debian's fortunes, byte-level): the
// held-out loss must fall well below the unigram entropy of the text, i.e. the model learns
// context, not just byte frequencies. Prints both figures. Label "integration" (~15-30 s).
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <memory>

#include "data/batcher.h"
#include "data/byte_tokenizer.h"
#include "data/fortunes_corpus.h"
#include "dependency.h"
#include "kernels/cpu/clip.h"
#include "model/gpt_model.h"
#include "train/adamw_optimizer.h"

namespace ntp::train {
namespace {

// Entropy in nats of the byte distribution of `tokens`.
double unigram_entropy(const std::vector<uint16_t>& tokens) {
  std::vector<double> counts(256, 0.0);
  for (uint16_t t : tokens) counts[t] += 1.0;
  double h = 0.0;
  for (double c : counts) {
    if (c > 0) {
      const double p = c / static_cast<double>(tokens.size());
      h -= p * std::log(p);
    }
  }
  return h;
}

TEST(TrainingRunTest, LossFallsWellBelowUnigramEntropy) {
  auto text = data::load_fortunes_text();
  NTP_REQUIRE_DEPENDENCY(text.ok(), text.status().to_string());
  const std::vector<uint16_t> all = data::encode_bytes(*text);
  const size_t split = all.size() / 10 * 9;
  auto train_tokens =
      std::make_shared<const std::vector<uint16_t>>(all.begin(), all.begin() + split);
  auto val_tokens = std::make_shared<const std::vector<uint16_t>>(all.begin() + split, all.end());
  const double entropy = unigram_entropy(*train_tokens);

  model::GptConfig config;
  config.n_layer = 2;
  config.n_head = 4;
  config.n_embd = 64;
  config.n_ctx = 64;
  config.vocab_size = data::kByteVocabSize;
  const int64_t batch = 8, steps = 500;
  auto created = model::GptModel::create(config, model::full_shard(config), 2024);
  ASSERT_TRUE(created.ok());
  model::GptModel& m = *created;
  AdamWOptimizer opt(
      m.params(), {.lr = 0.0f, .beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f, .weight_decay = 0.1f});
  auto train = data::Batcher::create(train_tokens, batch, config.n_ctx, 1).value();
  auto val = data::Batcher::create(val_tokens, 16, config.n_ctx, 2).value();

  auto val_loss = [&]() {
    double total = 0.0;
    for (int64_t s = 0; s < 4; ++s) {
      const data::Batch b = val.get(s).value();
      total += m.loss(b.tokens, b.targets, b.samples, b.seq_len).value();
    }
    return total / 4.0;
  };
  const double initial = val_loss();
  const auto start = std::chrono::steady_clock::now();
  for (int64_t step = 0; step < steps; ++step) {
    const data::Batch b = train.get(step).value();
    m.zero_grad();
    ASSERT_TRUE(m.forward_backward(b.tokens, b.targets, b.samples, b.seq_len).ok());
    const double norm = m.grad_norm().value();
    opt.step(m.params(), warmup_cosine_lr(step, 20, steps, 4e-3f, 4e-4f),
             kernels::cpu::clip_coefficient(norm, 1.0));
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const double final_loss = val_loss();
  std::printf(
      "fortunes corpus: %zu train bytes, unigram entropy %.3f nats (%.3f bits/byte)\n"
      "model %lld params, %lld steps x %lld x %lld tokens in %.1f s\n"
      "held-out loss: %.3f nats at init -> %.3f nats (%.3f bits/byte)\n",
      train_tokens->size(), entropy, entropy / std::log(2.0),
      static_cast<long long>(config.num_params()), static_cast<long long>(steps),
      static_cast<long long>(batch), static_cast<long long>(config.n_ctx), seconds, initial,
      final_loss, final_loss / std::log(2.0));
  EXPECT_NEAR(initial, std::log(256.0), 0.2);  // starts near uniform over 256 bytes
  EXPECT_LT(final_loss, entropy - 0.5);        // well below the unigram entropy
}

}  // namespace
}  // namespace ntp::train
