// BackwardOptions: how one forward_backward call of a model (GptModel, LlamaModel) contributes to
// the gradients.
#pragma once

#include <functional>
#include <span>

namespace ntp::model {

struct BackwardOptions {
  // Gradients accumulate loss_scale * d(mean loss of this call)/d(param): with gradient
  // accumulation over a global batch of N samples, a micro-batch of m samples passes m / N.
  float loss_scale = 1.0f;
  // Called on the calling thread during backward with the indices (into params()) of parameters
  // whose gradient this call will not touch again, so their synchronization can start while
  // backward goes on. Every parameter is reported exactly once per call, in the order of the
  // model's grads_ready_order() (GptModel: ln_f, then each block from the last to the first (all
  // 12 of its tensors), then wte and wpe, the tied embedding being final only after the
  // embedding's backward; LlamaModel: model/llama_model.h).
  std::function<void(std::span<const int> params)> on_grads_ready;
};

}  // namespace ntp::model
