#include "power/power_control.h"

#include <gtest/gtest.h>

namespace ntp::power {
namespace {

TEST(RecordingPowerControlTest, RecordsSettingsInOrderAndRejectsNonsense) {
  RecordingPowerControl control;
  EXPECT_EQ(control.current(2), 1.0);
  ASSERT_TRUE(control.set_domain_power(2, 1.25).ok());
  ASSERT_TRUE(control.set_domain_power(0, 1.1).ok());
  ASSERT_TRUE(control.set_domain_power(2, 1.0).ok());
  EXPECT_EQ(control.current(2), 1.0);
  EXPECT_EQ(control.current(0), 1.1);
  ASSERT_EQ(control.settings().size(), 3u);
  EXPECT_EQ(control.settings()[0].power_factor, 1.25);
  EXPECT_EQ(control.set_domain_power(1, 0.0).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(control.set_domain_power(-1, 1.2).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(control.settings().size(), 3u);
}

}  // namespace
}  // namespace ntp::power
