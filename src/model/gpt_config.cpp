#include "model/gpt_config.h"

#include <string>

namespace ntp::model {

Status GptConfig::validate() const {
  auto positive = [](const char* name, int64_t v) -> Status {
    if (v > 0) return ok_status();
    return invalid_argument(std::string(name) + " = " + std::to_string(v) + " must be > 0");
  };
  NTP_RETURN_IF_ERROR(positive("n_layer", n_layer));
  NTP_RETURN_IF_ERROR(positive("n_head", n_head));
  NTP_RETURN_IF_ERROR(positive("n_embd", n_embd));
  NTP_RETURN_IF_ERROR(positive("n_ctx", n_ctx));
  NTP_RETURN_IF_ERROR(positive("vocab_size", vocab_size));
  NTP_RETURN_IF_ERROR(positive("ffn_unit", ffn_unit));
  if (n_ffn < 0) return invalid_argument("n_ffn = " + std::to_string(n_ffn) + " must be >= 0");
  if (n_embd % n_head != 0) {
    return invalid_argument("n_embd = " + std::to_string(n_embd) +
                            " is not a multiple of n_head = " + std::to_string(n_head) +
                            "; pick n_embd divisible by n_head");
  }
  if (ffn() % ffn_unit != 0) {
    return invalid_argument("FFN width " + std::to_string(ffn()) +
                            " is not a multiple of ffn_unit = " + std::to_string(ffn_unit));
  }
  return ok_status();
}

int64_t GptConfig::num_params() const {
  const int64_t c = n_embd, f = ffn();
  const int64_t per_layer =
      2 * c + (c * 3 * c + 3 * c) + (c * c + c) + 2 * c + (c * f + f) + (f * c + c);
  return vocab_size * c + n_ctx * c + n_layer * per_layer + 2 * c;
}

}  // namespace ntp::model
