// The field checks that the model families' validate() share; each fails with kInvalidArgument
// naming the field and its value.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <string>

#include "core/status.h"

namespace ntp::model {

struct NamedCount {
  const char* name;
  int64_t value;
};

// "<name> = <value> must be > 0" for the first field, in the order given, that is not positive.
inline Status check_positive(std::initializer_list<NamedCount> fields) {
  for (const NamedCount& f : fields) {
    if (f.value <= 0) {
      return invalid_argument(std::string(f.name) + " = " + std::to_string(f.value) +
                              " must be > 0");
    }
  }
  return ok_status();
}

// "<name> = <value> must be >= 0" when the field is negative.
inline Status check_non_negative(NamedCount field) {
  if (field.value >= 0) return ok_status();
  return invalid_argument(std::string(field.name) + " = " + std::to_string(field.value) +
                          " must be >= 0");
}

// The FFN width must split into whole units of ffn_unit (the tensor-parallel sharding grain).
inline Status check_ffn_unit(int64_t ffn, int64_t ffn_unit) {
  if (ffn % ffn_unit == 0) return ok_status();
  return invalid_argument("FFN width " + std::to_string(ffn) +
                          " is not a multiple of ffn_unit = " + std::to_string(ffn_unit));
}

// The fields every family has (GptConfig, LlamaConfig): the sizes positive, n_ffn (0: the family's
// default width) not negative.
template <typename Config>
Status check_shared_fields(const Config& c) {
  NTP_RETURN_IF_ERROR(check_positive({{"n_layer", c.n_layer},
                                      {"n_head", c.n_head},
                                      {"n_embd", c.n_embd},
                                      {"n_ctx", c.n_ctx},
                                      {"vocab_size", c.vocab_size},
                                      {"ffn_unit", c.ffn_unit}}));
  return check_non_negative({"n_ffn", c.n_ffn});
}

}  // namespace ntp::model
