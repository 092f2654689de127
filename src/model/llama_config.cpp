#include "model/llama_config.h"

#include <string>

#include "model/config_checks.h"

namespace ntp::model {

Status LlamaConfig::validate() const {
  NTP_RETURN_IF_ERROR(check_shared_fields(*this));
  NTP_RETURN_IF_ERROR(check_positive({{"n_kv_head", n_kv_head}}));
  NTP_RETURN_IF_ERROR(check_non_negative({"head_dim", head_dim}));
  if (n_head % n_kv_head != 0) {
    return invalid_argument("n_head = " + std::to_string(n_head) +
                            " is not a multiple of n_kv_head = " + std::to_string(n_kv_head) +
                            "; every KV head serves the same number of query heads");
  }
  if (head_dim == 0 && n_embd % n_head != 0) {
    return invalid_argument("n_embd = " + std::to_string(n_embd) +
                            " is not a multiple of n_head = " + std::to_string(n_head) +
                            "; pick n_embd divisible by n_head or set head_dim");
  }
  if (dim() % 2 != 0) {
    return invalid_argument("head size " + std::to_string(dim()) +
                            " is odd; RoPE rotates pairs (i, i + head_dim / 2)");
  }
  NTP_RETURN_IF_ERROR(check_ffn_unit(ffn(), ffn_unit));
  if (!(rms_norm_eps > 0.0)) return invalid_argument("rms_norm_eps must be > 0");
  if (!(rope_theta > 0.0)) return invalid_argument("rope_theta must be > 0");
  return ok_status();
}

int64_t LlamaConfig::num_params() const {
  const int64_t c = n_embd, d = dim(), f = ffn();
  const int64_t attn = c * n_head * d * 2 + c * n_kv_head * d * 2;  // q, o; k, v
  const int64_t per_layer = 2 * c + attn + 3 * c * f;
  return 2 * vocab_size * c + n_layer * per_layer + c;
}

}  // namespace ntp::model
