#include "model/llama_config.h"

#include <string>

namespace ntp::model {

Status LlamaConfig::validate() const {
  auto positive = [](const char* name, int64_t v) -> Status {
    if (v > 0) return ok_status();
    return invalid_argument(std::string(name) + " = " + std::to_string(v) + " must be > 0");
  };
  NTP_RETURN_IF_ERROR(positive("n_layer", n_layer));
  NTP_RETURN_IF_ERROR(positive("n_head", n_head));
  NTP_RETURN_IF_ERROR(positive("n_kv_head", n_kv_head));
  NTP_RETURN_IF_ERROR(positive("n_embd", n_embd));
  NTP_RETURN_IF_ERROR(positive("n_ctx", n_ctx));
  NTP_RETURN_IF_ERROR(positive("vocab_size", vocab_size));
  NTP_RETURN_IF_ERROR(positive("ffn_unit", ffn_unit));
  if (n_ffn < 0) return invalid_argument("n_ffn = " + std::to_string(n_ffn) + " must be >= 0");
  if (head_dim < 0) {
    return invalid_argument("head_dim = " + std::to_string(head_dim) + " must be >= 0");
  }
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
  if (ffn() % ffn_unit != 0) {
    return invalid_argument("FFN width " + std::to_string(ffn()) +
                            " is not a multiple of ffn_unit = " + std::to_string(ffn_unit));
  }
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
