#include "elastic/fault_spec.h"

#include <gtest/gtest.h>

namespace ntp::elastic {
namespace {

TEST(FaultSpecTest, ParsesStepsAndSeconds) {
  Result<FaultSpec> kill = parse_fault_spec("kill:rank=3,at=12");
  ASSERT_TRUE(kill.ok()) << kill.status().to_string();
  EXPECT_EQ(kill->kind, FaultKind::kKill);
  EXPECT_EQ(kill->rank, 3);
  ASSERT_TRUE(kill->step.has_value());
  EXPECT_EQ(*kill->step, 12);
  EXPECT_FALSE(kill->seconds.has_value());

  Result<FaultSpec> hang = parse_fault_spec("hang:at=2.5s,rank=0");
  ASSERT_TRUE(hang.ok()) << hang.status().to_string();
  EXPECT_EQ(hang->kind, FaultKind::kHang);
  EXPECT_EQ(hang->rank, 0);
  ASSERT_TRUE(hang->seconds.has_value());
  EXPECT_DOUBLE_EQ(*hang->seconds, 2.5);
  EXPECT_FALSE(hang->step.has_value());

  Result<FaultSpec> repair = parse_fault_spec("repair:rank=7,at=0");
  ASSERT_TRUE(repair.ok());
  EXPECT_EQ(repair->kind, FaultKind::kRepair);
}

TEST(FaultSpecTest, RejectsMalformedSpecsNamingThePart) {
  const char* bad[] = {"kill",
                       "explode:rank=1,at=2",
                       "kill:rank=1",
                       "kill:at=3",
                       "kill:rank=x,at=3",
                       "kill:rank=-1,at=3",
                       "kill:rank=1,at=",
                       "kill:rank=1,at=3q",
                       "kill:rank=1,at=3,color=red"};
  for (const char* text : bad) {
    Result<FaultSpec> spec = parse_fault_spec(text);
    EXPECT_FALSE(spec.ok()) << text;
    EXPECT_EQ(spec.status().code(), StatusCode::kInvalidArgument) << text;
    EXPECT_NE(spec.status().message().find(text), std::string::npos) << spec.status().message();
  }
}

TEST(FaultSpecTest, ChaosSpec) {
  Result<ChaosSpec> chaos = parse_chaos_spec("42,0.5");
  ASSERT_TRUE(chaos.ok());
  EXPECT_EQ(chaos->seed, 42U);
  EXPECT_DOUBLE_EQ(chaos->rate_per_second, 0.5);
  for (const char* text : {"42", "42,0", "x,1", "42,-1", "42,1,2", ""}) {
    EXPECT_EQ(parse_chaos_spec(text).status().code(), StatusCode::kInvalidArgument) << text;
  }
}

}  // namespace
}  // namespace ntp::elastic
