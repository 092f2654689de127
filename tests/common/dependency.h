// Tests that need an optional outside program or data set (redis-server, the fortunes corpus)
// skip without it on a developer's machine. Under CI (the CI variable set, as every CI service
// does) a missing dependency fails the test instead: a skip there would report a green run that
// never tested the feature.
#pragma once

#include <gtest/gtest.h>

#include <cstdlib>
#include <string_view>

namespace ntp::testing {

// True when the CI environment variable is set to anything but "", "0" or "false".
inline bool running_under_ci() {
  const char* value = std::getenv("CI");
  if (value == nullptr) return false;
  const std::string_view text(value);
  return !text.empty() && text != "0" && text != "false";
}

}  // namespace ntp::testing

// In a test body: when `available` is false, skip (outside CI) or fail (under CI), naming what is
// missing (`what` is streamed, so it may be a Status string) and how to install it.
#define NTP_REQUIRE_DEPENDENCY(available, what)                                                  \
  do {                                                                                           \
    if (!(available)) {                                                                          \
      if (::ntp::testing::running_under_ci()) {                                                  \
        GTEST_FAIL() << "missing test dependency under CI=" << std::getenv("CI") << ": " << what \
                     << " (CI must run every test; install it, e.g. scripts/setup.sh)";          \
      }                                                                                          \
      GTEST_SKIP() << "missing test dependency: " << what << " (a failure under CI=true)";       \
    }                                                                                            \
  } while (0)
