// The model a bench times: the whole of a config's family on one rank (TP degree 1), seed 1.
#pragma once

#include <cstdint>
#include <memory>

#include "model/model.h"
#include "model/model_config.h"

namespace ntp::bench {

// A `family` model of `layers` layers, `width` wide with `heads` heads, over `context` tokens and a
// 256-token vocabulary; a Llama has max(1, heads / 2) key/value heads.
model::ModelConfig bench_model_config(model::ModelFamily family, int64_t layers, int64_t heads,
                                      int64_t width, int64_t context);

// GPT-2 or Llama (config.family); nullptr when the config is invalid.
std::unique_ptr<model::Model> make_full_model(const model::ModelConfig& config);

}  // namespace ntp::bench
