#include "core/status.h"

#include <gtest/gtest.h>

namespace ntp {
namespace {

Result<int> parse_positive(int x) {
  if (x <= 0) return invalid_argument("x must be positive, got " + std::to_string(x));
  return x;
}

Result<int> doubled(int x) {
  NTP_ASSIGN_OR_RETURN(int v, parse_positive(x));
  return 2 * v;
}

Status check_both(int a, int b) {
  NTP_RETURN_IF_ERROR(parse_positive(a).status());
  NTP_RETURN_IF_ERROR(parse_positive(b).status());
  return ok_status();
}

TEST(Status, OkByDefault) {
  Status s;
  EXPECT_TRUE(s.ok());
  EXPECT_EQ(s.to_string(), "OK");
}

TEST(Status, CarriesCodeAndMessage) {
  Status s = unavailable("rank 3 is gone");
  EXPECT_FALSE(s.ok());
  EXPECT_EQ(s.code(), StatusCode::kUnavailable);
  EXPECT_EQ(s.to_string(), "UNAVAILABLE: rank 3 is gone");
  EXPECT_EQ(s.with_context("allreduce").message(), "allreduce: rank 3 is gone");
}

TEST(Result, PropagatesThroughMacros) {
  EXPECT_EQ(doubled(4).value(), 8);
  Result<int> bad = doubled(-1);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("-1"), std::string::npos);
  EXPECT_TRUE(check_both(1, 2).ok());
  EXPECT_EQ(check_both(1, 0).code(), StatusCode::kInvalidArgument);
}

TEST(ResultDeathTest, ValueOfErrorAborts) {
  Result<int> bad = invalid_argument("nope");
  EXPECT_DEATH((void)bad.value(), "check failed");
}

}  // namespace
}  // namespace ntp
