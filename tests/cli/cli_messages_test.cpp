// Error messages of the `ntp` binary itself (not of one subcommand), through the real binary:
// exit code 2, one line on stderr that names the bad value and what is allowed.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "child_process.h"

namespace ntp {
namespace {

testing::CommandOutput ntp(std::vector<std::string> args) {
  args.insert(args.begin(), NTP_BINARY);
  return testing::run_command(args);
}

void expect_one_line_bad_input(const testing::CommandOutput& run) {
  EXPECT_EQ(run.exit_code, 2) << run.err;
  EXPECT_TRUE(run.out.empty()) << run.out;
  EXPECT_EQ(std::count(run.err.begin(), run.err.end(), '\n'), 1) << run.err;
}

TEST(CliMessages, AnUnknownCommandNamesItAndListsTheCommands) {
  const auto run = ntp({"bogus"});
  expect_one_line_bad_input(run);
  EXPECT_NE(run.err.find("unknown command 'bogus'"), std::string::npos) << run.err;
  for (const char* command : {"plan", "sim", "power", "launch"}) {
    EXPECT_NE(run.err.find(command), std::string::npos) << command << " missing: " << run.err;
  }
  EXPECT_EQ(run.err.find("comm-worker"), std::string::npos) << "hidden commands stay hidden";
}

TEST(CliMessages, NoCommandListsTheCommands) {
  const auto run = ntp({});
  expect_one_line_bad_input(run);
  EXPECT_NE(run.err.find("no command given"), std::string::npos) << run.err;
  EXPECT_NE(run.err.find("launch"), std::string::npos) << run.err;
}

TEST(CliMessages, ZeroWorkersPerNodeSaysAtLeastOne) {
  for (const char* bad : {"0", "-3"}) {
    const auto run = ntp({"launch", "--nproc-per-node", bad, "--", "true"});
    expect_one_line_bad_input(run);
    EXPECT_NE(run.err.find("--nproc-per-node " + std::string(bad) + " must be at least 1"),
              std::string::npos)
        << run.err;
    EXPECT_EQ(run.err.find("not in range"), std::string::npos) << run.err;
  }
}

// The batch flags of `ntp train` (checked before any worker starts; nothing is written).
TEST(CliMessages, BadBatchPolicyPowerLimitAndDeviceRateNameTheValue) {
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"--batch-policy", "fair"}, "--batch-policy 'fair' is unknown; use keep, scale or boost"},
      {{"--power-limit", "3"}, "--power-limit 3.000000 must be in [1, 2]"},
      {{"--power-limit", "0.5"}, "--power-limit 0.500000 must be in [1, 2]"},
      {{"--emulate-device-gflops", "-1"}, "--emulate-device-gflops -1.000000 must be >= 0"}};
  for (const auto& [flags, message] : cases) {
    std::vector<std::string> args = {"train", "--out", "/nonexistent/ntp-cli-test"};
    args.insert(args.end(), flags.begin(), flags.end());
    const auto run = ntp(args);
    expect_one_line_bad_input(run);
    EXPECT_NE(run.err.find(message), std::string::npos) << run.err;
  }
}

// --dtype takes fp32 or bf16 only (fp16 has no path: its 5-bit exponent would need loss scaling).
TEST(CliMessages, BadDtypeNamesTheValueAndTheChoices) {
  for (const char* value : {"fp16", "float32", "BF16"}) {
    const auto run = ntp({"train", "--out", "/nonexistent/ntp-cli-test", "--dtype", value});
    expect_one_line_bad_input(run);
    EXPECT_NE(run.err.find(std::string("--dtype '") + value + "' is unknown; use fp32 or bf16"),
              std::string::npos)
        << run.err;
  }
}

}  // namespace
}  // namespace ntp
