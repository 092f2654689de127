#include "core/check.h"

#include <cstdio>
#include <cstdlib>

namespace ntp::detail {

void check_failed(const char* file, int line, const char* condition, std::string_view message) {
  std::fprintf(stderr, "%s:%d: check failed: %s", file, line, condition);
  if (!message.empty()) {
    std::fprintf(stderr, " (%.*s)", static_cast<int>(message.size()), message.data());
  }
  std::fprintf(stderr, "\n");
  std::fflush(stderr);
  std::abort();
}

}  // namespace ntp::detail
