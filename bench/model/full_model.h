// The model a bench times: the whole of a config's family on one rank (TP degree 1), seed 1.
#pragma once

#include <memory>

#include "model/model.h"
#include "model/model_config.h"

namespace ntp::bench {

// GPT-2 or Llama (config.family); nullptr when the config is invalid.
std::unique_ptr<model::Model> make_full_model(const model::ModelConfig& config);

}  // namespace ntp::bench
