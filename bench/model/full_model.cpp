#include "full_model.h"

#include <algorithm>

#include "model/gpt_model.h"
#include "model/llama_model.h"

namespace ntp::bench {

model::ModelConfig bench_model_config(model::ModelFamily family, int64_t layers, int64_t heads,
                                      int64_t width, int64_t context) {
  model::ModelConfig config;
  config.family = family;
  config.n_layer = layers;
  config.n_head = heads;
  config.n_embd = width;
  config.n_ctx = context;
  config.vocab_size = 256;
  if (family == model::ModelFamily::kLlama) config.n_kv_head = std::max<int64_t>(1, heads / 2);
  return config;
}

std::unique_ptr<model::Model> make_full_model(const model::ModelConfig& c) {
  if (c.family == model::ModelFamily::kLlama) {
    auto m = model::LlamaModel::create(c.llama(), model::full_shard(c.llama()), 1);
    return m.ok() ? std::make_unique<model::LlamaModel>(std::move(*m)) : nullptr;
  }
  auto m = model::GptModel::create(c.gpt(), model::full_shard(c.gpt()), 1);
  return m.ok() ? std::make_unique<model::GptModel>(std::move(*m)) : nullptr;
}

}  // namespace ntp::bench
