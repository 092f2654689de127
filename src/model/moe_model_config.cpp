#include "model/moe_model_config.h"

#include <cmath>
#include <string>

namespace ntp::model {

MoeConfig MoeModelConfig::block() const {
  MoeConfig b;
  b.hidden = llama.n_embd;
  b.ffn = llama.ffn();
  b.n_experts = n_experts;
  b.top_k = top_k;
  b.n_shared = 0;
  b.normalize_top_k = true;
  return b;
}

LlamaConfig MoeModelConfig::decoder() const {
  LlamaConfig c = llama;
  if (n_shared > 0) c.n_ffn = n_shared * llama.ffn();
  return c;
}

Status MoeModelConfig::validate() const {
  NTP_RETURN_IF_ERROR(llama.validate());
  if (n_shared < 0) {
    return invalid_argument("n_shared_experts = " + std::to_string(n_shared) +
                            " must be >= 0 (--shared-experts N)");
  }
  NTP_RETURN_IF_ERROR(decoder().validate());
  if (n_experts < 1) {
    return invalid_argument("n_experts = " + std::to_string(n_experts) +
                            " must be >= 1 (--experts E)");
  }
  if (top_k < 1 || top_k > n_experts) {
    return invalid_argument("top_k = " + std::to_string(top_k) + " must lie in [1, n_experts = " +
                            std::to_string(n_experts) + "] (--top-k K)");
  }
  if (!(router_aux_loss_coef >= 0.0) || !std::isfinite(router_aux_loss_coef)) {
    return invalid_argument("router_aux_loss_coef = " + std::to_string(router_aux_loss_coef) +
                            " must be finite and >= 0 (Mixtral uses 0.02)");
  }
  return ok_status();
}

int64_t MoeModelConfig::num_params() const {
  const int64_t c = llama.n_embd, f = llama.ffn();
  const int64_t dense_ffn = llama.n_layer * 3 * c * f;
  return llama.num_params() - dense_ffn +
         llama.n_layer * (n_experts * c + (n_experts + n_shared) * 3 * c * f);
}

}  // namespace ntp::model
