#include "model/gpt_config.h"

#include <string>

#include "model/config_checks.h"

namespace ntp::model {

Status GptConfig::validate() const {
  NTP_RETURN_IF_ERROR(check_shared_fields(*this));
  if (n_embd % n_head != 0) {
    return invalid_argument("n_embd = " + std::to_string(n_embd) +
                            " is not a multiple of n_head = " + std::to_string(n_head) +
                            "; pick n_embd divisible by n_head");
  }
  return check_ffn_unit(ffn(), ffn_unit);
}

int64_t GptConfig::num_params() const {
  const int64_t c = n_embd, f = ffn();
  const int64_t per_layer =
      2 * c + (c * 3 * c + 3 * c) + (c * c + c) + 2 * c + (c * f + f) + (f * c + c);
  return vocab_size * c + n_ctx * c + n_layer * per_layer + 2 * c;
}

}  // namespace ntp::model
