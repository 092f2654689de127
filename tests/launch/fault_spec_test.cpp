#include "launch/fault_spec.h"

#include <gtest/gtest.h>

namespace ntp::launch {
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

TEST(FaultSpecTest, ParsesStallsAndSlowdowns) {
  Result<FaultSpec> stall = parse_fault_spec("stall:rank=2,at=5");
  ASSERT_TRUE(stall.ok()) << stall.status().to_string();
  EXPECT_EQ(stall->kind, FaultKind::kStall);
  EXPECT_EQ(stall->rank, 2);
  EXPECT_EQ(stall->step, 5);

  Result<FaultSpec> slow = parse_fault_spec("slow:rank=1,factor=0.5,at=4,until=9");
  ASSERT_TRUE(slow.ok()) << slow.status().to_string();
  EXPECT_EQ(slow->kind, FaultKind::kSlow);
  EXPECT_EQ(slow->rank, 1);
  EXPECT_DOUBLE_EQ(slow->factor, 0.5);
  EXPECT_EQ(slow->step, 4);
  EXPECT_EQ(slow->until, 9);
  EXPECT_EQ(describe_fault(*slow), "slow:rank=1,factor=0.5,at=4,until=9");

  Result<FaultSpec> throttle = parse_fault_spec("throttle:rank=5,factor=0.25,at=3,until=40");
  ASSERT_TRUE(throttle.ok()) << throttle.status().to_string();
  EXPECT_EQ(throttle->kind, FaultKind::kThrottle);
  EXPECT_DOUBLE_EQ(throttle->factor, 0.25);
  EXPECT_EQ(throttle->step, 3);
  EXPECT_EQ(throttle->until, 40);
  EXPECT_EQ(describe_fault(*throttle), "throttle:rank=5,factor=0.25,at=3,until=40");

  Result<FaultSpec> point = parse_fault_spec("point:phase=reform_build,at=5,rank=10,action=stop");
  ASSERT_TRUE(point.ok()) << point.status().to_string();
  EXPECT_EQ(point->kind, FaultKind::kPoint);
  EXPECT_EQ(point->rank, 10);
  EXPECT_EQ(point->point, "reform_build:5:10:stop");
  Result<FaultSpec> role = parse_fault_spec("point:rank=decider@1,phase=reform_agreed,at=*");
  ASSERT_TRUE(role.ok()) << role.status().to_string();
  EXPECT_EQ(role->rank, -1);  // any node's worker may hold the role
  EXPECT_EQ(role->point, "reform_agreed:*:decider@1");

  Result<FaultSpec> to_end = parse_fault_spec("slow:factor=1,rank=0,at=1.5s");
  ASSERT_TRUE(to_end.ok()) << to_end.status().to_string();
  EXPECT_DOUBLE_EQ(to_end->factor, 1.0);
  EXPECT_EQ(to_end->seconds, 1.5);
  EXPECT_FALSE(to_end->until.has_value());
}

// Each bad spec is rejected with a message that quotes it and names the bad part.
TEST(FaultSpecTest, RejectsBadStallsAndSlowdowns) {
  struct Case {
    const char* text;
    const char* named;
  };
  const Case cases[] = {
      {"stall:rank=1,at=2s", "use at=STEP"},
      {"stall:rank=1", "needs both rank= and at="},
      {"stall:rank=1,at=3,factor=0.5", "unknown field 'factor' for stall"},
      {"slow:rank=1,at=3", "needs factor=F"},
      {"slow:rank=1,factor=0,at=3", "factor='0' is not in (0, 1]"},
      {"slow:rank=1,factor=-0.5,at=3", "factor='-0.5'"},
      {"slow:rank=1,factor=1.5,at=3", "factor='1.5'"},
      {"slow:rank=1,factor=x,at=3", "factor='x'"},
      {"slow:rank=1,factor=0.5,at=3,until=3", "until=3 must be after at=3"},
      {"slow:rank=1,factor=0.5,at=5,until=2", "until=2 must be after at=5"},
      {"slow:rank=1,factor=0.5,at=5,until=x", "until='x' is not a step"},
      {"slow:rank=1,factor=0.5,at=5,speed=2", "unknown field 'speed' for slow"},
      {"kill:rank=1,at=3,until=5", "unknown field 'until' for kill"},
      {"throttle:rank=1,factor=0.5,at=2s", "a throttle happens at a step"},
      {"point:phase=forward,at=5", "needs phase=, at= and rank="},
      {"point:phase=fwd,at=5,rank=1", "phase='fwd' is not a fault point"},
      {"point:phase=forward,at=2s,rank=1", "at='2s' is not a step"},
      {"point:phase=forward,at=5,rank=leader", "rank='leader' is neither a rank nor a role"},
      {"point:phase=forward,at=5,rank=1,action=explode", "action='explode'"},
      {"point:phase=forward,at=5,rank=1,factor=0.5", "unknown field 'factor' for point"},
      {"throttle:rank=1,at=3", "needs factor=F"},
      {"throttle:rank=1,factor=0,at=3", "factor='0' is not in (0, 1]"},
      {"throttle:rank=1,factor=0.5,at=5,until=5", "until=5 must be after at=5"},
  };
  for (const Case& c : cases) {
    Result<FaultSpec> spec = parse_fault_spec(c.text);
    ASSERT_FALSE(spec.ok()) << c.text;
    EXPECT_EQ(spec.status().code(), StatusCode::kInvalidArgument) << c.text;
    EXPECT_NE(spec.status().message().find(c.text), std::string::npos) << spec.status().message();
    EXPECT_NE(spec.status().message().find(c.named), std::string::npos) << spec.status().message();
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
}  // namespace ntp::launch
