#include "core/units.h"

#include <gtest/gtest.h>

namespace ntp {
namespace {

TEST(Units, ArithmeticStaysInType) {
  const Seconds a(1.5), b(0.5);
  EXPECT_DOUBLE_EQ((a + b).value(), 2.0);
  EXPECT_DOUBLE_EQ(a / b, 3.0);
  EXPECT_LT(b, a);
}

TEST(Units, FormatBytes) {
  EXPECT_EQ(format_bytes(0), "0 B");
  EXPECT_EQ(format_bytes(1023), "1023 B");
  EXPECT_EQ(format_bytes(1536), "1.50 KiB");
  EXPECT_EQ(format_bytes(3.0 * 1024 * 1024 * 1024), "3.00 GiB");
}

TEST(Units, FormatSeconds) {
  EXPECT_EQ(format_seconds(0.0005), "500 us");
  EXPECT_EQ(format_seconds(1.25), "1.25 s");
  EXPECT_EQ(format_seconds(2 * 86400.0), "2.00 d");
}

}  // namespace
}  // namespace ntp
