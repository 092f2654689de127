#include "sim/failures.h"

#include <gtest/gtest.h>

#include "sim_test_util.h"

namespace ntp::sim {
namespace {

TEST(Trace, ParsesRowsAndAlignsBlastGroups) {
  const SimConfig c = testing::small_config();
  const std::string path = testing::write_temp(
      "ok.csv",
      "hours,gpu,kind,repair_hours,blast\n0.5,6,hardware,2,4\n# comment\n1,9,software,0.5,1\n");
  Result<std::vector<FailureEvent>> t = load_trace(path, c);
  ASSERT_TRUE(t.ok()) << t.status().to_string();
  ASSERT_EQ(t->size(), 2u);
  EXPECT_EQ((*t)[0].first_gpu, 4);
  EXPECT_EQ((*t)[0].count, 4);
  EXPECT_DOUBLE_EQ((*t)[0].time_s, 1800.0);
  EXPECT_FALSE((*t)[1].hardware);
}

TEST(Trace, BadRowsNameLineAndValue) {
  const SimConfig c = testing::small_config();
  auto err = [&](const std::string& body) {
    return load_trace(testing::write_temp("bad.csv", "hours,gpu,kind,repair_hours\n" + body), c)
        .status()
        .message();
  };
  EXPECT_NE(err("1,64,hardware,2\n").find("gpu '64'"), std::string::npos);
  EXPECT_NE(err("1,3,cosmic,2\n").find("kind 'cosmic'"), std::string::npos);
  EXPECT_NE(err("-1,3,hardware,2\n").find("hours '-1'"), std::string::npos);
  EXPECT_NE(err("2,3,hardware,2\n1,3,hardware,2\n").find(":3:"), std::string::npos);
  EXPECT_NE(err("1,3,hardware,2,1e300\n").find("blast '1e300'"), std::string::npos);
  EXPECT_NE(err("1,3,hardware,2,3\n").find("blast '3'"), std::string::npos);
  EXPECT_NE(load_trace("/nonexistent/trace.csv", c).status().message().find("cannot read"),
            std::string::npos);
}

TEST(FailureProcess, BlastGroupsAreAlignedAndWeighted) {
  SimConfig c =
      testing::small_config(1, {"failures.rate_per_gpu_day=1", "failures.blast_sizes=[1, 4]",
                                "failures.blast_weights=[3, 1]"});
  FailureProcess p(c, Rng(3), 0.0);
  int trays = 0;
  const int n = 4000;
  double last = 0;
  for (int i = 0; i < n; ++i) {
    const FailureEvent e = p.next();
    EXPECT_GT(e.time_s, last);
    last = e.time_s;
    EXPECT_EQ(e.first_gpu % e.count, 0);
    if (e.count == 4) ++trays;
  }
  EXPECT_NEAR(trays / static_cast<double>(n), 0.25, 0.03);
  // Mean inter-arrival time = 1 / (64 GPUs x 1 per day).
  EXPECT_NEAR(last / n, 86400.0 / 64, 0.05 * 86400.0 / 64);
}

}  // namespace
}  // namespace ntp::sim
