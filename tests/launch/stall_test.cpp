#include "launch/stall.h"

#include "launch/throttle.h"

#include <gtest/gtest.h>

#include <map>

namespace ntp::launch {
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

TEST(ThrottleTest, ReadsFactorAndStepsFromTheEnvironment) {
  const std::optional<Throttle> t = throttle_from_env(env_of({{"NTP_THROTTLE", "0.25,3,40"}}));
  ASSERT_TRUE(t.has_value());
  EXPECT_EQ(t->factor, 0.25);
  EXPECT_EQ(t->at, 3);
  EXPECT_EQ(t->until, 40);
  const std::optional<Throttle> open = throttle_from_env(env_of({{"NTP_THROTTLE", "0.5,0"}}));
  ASSERT_TRUE(open.has_value());
  EXPECT_FALSE(open->until.has_value());
  EXPECT_FALSE(throttle_from_env(env_of({})).has_value());
  // A typo must not slow anything.
  for (const char* bad :
       {"", "x", "0,3", "1.5,3", "0.5", "0.5,x", "0.5,3,3", "0.5,3,2", "0.5,-1"}) {
    EXPECT_FALSE(throttle_from_env(env_of({{"NTP_THROTTLE", bad}})).has_value()) << bad;
  }
}

TEST(ThrottleTest, FullSpeedWithoutTheVariable) {
  for (int64_t step = 0; step < 100; ++step) EXPECT_EQ(throttle_factor(step), 1.0);
}

}  // namespace
}  // namespace ntp::launch
