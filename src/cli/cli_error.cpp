#include "cli/cli_error.h"

#include <cstdio>

namespace ntp::cli {

int report_error(std::string_view command, const Status& status) {
  std::fprintf(stderr, "ntp %.*s: error: %s\n", static_cast<int>(command.size()), command.data(),
               status.message().c_str());
  return status.code() == StatusCode::kInvalidArgument ? kExitBadInput : kExitFailure;
}

}  // namespace ntp::cli
