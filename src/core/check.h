// Invariant checks: a failed check is a bug in ntp, never bad user input (that is a Status).
// A failure prints "file:line: check failed: cond (message)" to stderr and aborts.
#pragma once

#include <string>
#include <string_view>

namespace ntp::detail {
[[noreturn]] void check_failed(const char* file, int line, const char* condition,
                               std::string_view message);
}  // namespace ntp::detail

#define NTP_CHECK(cond) \
  ((cond) ? static_cast<void>(0) : ::ntp::detail::check_failed(__FILE__, __LINE__, #cond, ""))

#define NTP_CHECK_MSG(cond, message) \
  ((cond) ? static_cast<void>(0)     \
          : ::ntp::detail::check_failed(__FILE__, __LINE__, #cond, std::string_view(message)))
