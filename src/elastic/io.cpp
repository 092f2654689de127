#include "elastic/io.h"

namespace ntp::elastic::io {

const char* name(const Op& op) {
  static constexpr const char* kNames[] = {
      "get_many", "set_many", "add", "claim", "append", "read", "erase", "erase_streams", "sleep"};
  static_assert(std::variant_size_v<Op> == sizeof(kNames) / sizeof(kNames[0]));
  return kNames[op.index()];
}

}  // namespace ntp::elastic::io
