#include "elastic/stall.h"

#include <gtest/gtest.h>

#include <map>

namespace ntp::elastic {
namespace {

EnvLookup env_of(std::map<std::string, std::string> vars) {
  return [vars](const std::string& name) -> std::optional<std::string> {
    const auto it = vars.find(name);
    if (it == vars.end()) return std::nullopt;
    return it->second;
  };
}

TEST(StallTest, ReadsTheStepFromTheEnvironment) {
  EXPECT_EQ(stall_step_from_env(env_of({{"NTP_STALL_AT", "7"}})), 7);
  EXPECT_EQ(stall_step_from_env(env_of({{"NTP_STALL_AT", "0"}})), 0);
  EXPECT_FALSE(stall_step_from_env(env_of({})).has_value());
  // A typo must not stall anything.
  for (const char* bad : {"", "x", "-1", "3s", "2.5"}) {
    EXPECT_FALSE(stall_step_from_env(env_of({{"NTP_STALL_AT", bad}})).has_value()) << bad;
  }
}

TEST(StallTest, ReturnsAtOnceWithoutTheVariable) {
  // This test process has no NTP_STALL_AT: every step goes through.
  for (int64_t step = 0; step < 100; ++step) stall_if_asked(step);
  SUCCEED();
}

}  // namespace
}  // namespace ntp::elastic
