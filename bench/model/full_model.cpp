#include "full_model.h"

#include "model/gpt_model.h"
#include "model/llama_model.h"

namespace ntp::bench {

std::unique_ptr<model::Model> make_full_model(const model::ModelConfig& c) {
  if (c.family == model::ModelFamily::kLlama) {
    auto m = model::LlamaModel::create(c.llama(), model::full_shard(c.llama()), 1);
    return m.ok() ? std::make_unique<model::LlamaModel>(std::move(*m)) : nullptr;
  }
  auto m = model::GptModel::create(c.gpt(), model::full_shard(c.gpt()), 1);
  return m.ok() ? std::make_unique<model::GptModel>(std::move(*m)) : nullptr;
}

}  // namespace ntp::bench
