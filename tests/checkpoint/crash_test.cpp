// SIGKILL in the middle of a save, with real processes: the previous checkpoint stays the one
// `latest` names and loads and verifies; the interrupted one is not loadable; a later save of the
// same step succeeds and cleans up what the crash left.
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "checkpoint/checkpoint_dir.h"
#include "checkpoint/reader.h"
#include "child_process.h"
#include "ckpt_test_util.h"
#include "temp_dir.h"

namespace ntp::checkpoint {
namespace {

namespace fs = std::filesystem;

// Reads the child's stdout until `marker` appears (or EOF).
std::string read_until(int fd, const std::string& marker) {
  std::string out;
  char buf[256];
  while (out.find(marker) == std::string::npos) {
    const ssize_t n = ::read(fd, buf, sizeof(buf));
    if (n <= 0) break;
    out.append(buf, static_cast<size_t>(n));
  }
  return out;
}

TEST(CrashDuringSave, PreviousCheckpointSurvivesAndPartialOneIsNotLoadable) {
  testing::TempDir dir;
  const ntp::testing::ChildProcess child =
      ntp::testing::start_child({CRASH_CHILD, dir.path().string()});
  // Killed while writing rank 1's shard of step 2 (rank 0's is complete on disk).
  const std::string seen = read_until(child.out_fd, "piece 100\n");
  ASSERT_NE(seen.find("committed 1"), std::string::npos) << seen;
  ASSERT_NE(seen.find("piece 100"), std::string::npos) << seen;
  ASSERT_EQ(seen.find("committed 2"), std::string::npos);
  ASSERT_EQ(::kill(child.pid, SIGKILL), 0);
  const ntp::testing::CommandOutput r = ntp::testing::finish_child(child, std::chrono::seconds(30));
  EXPECT_EQ(r.exit_code, 128 + SIGKILL);

  std::ifstream latest(dir.path() / "latest");
  std::string name;
  std::getline(latest, name);
  EXPECT_EQ(name, "step_00000001");
  Result<CheckpointReader> reader = CheckpointReader::open(dir.path());
  ASSERT_TRUE(reader.ok()) << reader.status().to_string();
  EXPECT_EQ(reader->manifest().meta.step, 1);
  EXPECT_TRUE(reader->verify_all().ok());

  const fs::path step2 = dir.path() / "step_00000002";
  ASSERT_TRUE(fs::is_directory(step2));
  EXPECT_FALSE(is_complete_step_dir(step2));
  EXPECT_TRUE(fs::exists(step2 / "shard_0.safetensors"));
  EXPECT_FALSE(fs::exists(step2 / "shard_1.safetensors"));  // only its temporary file
  Result<CheckpointReader> partial = CheckpointReader::open(step2);
  EXPECT_EQ(partial.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(partial.status().message().find("not a checkpoint"), std::string::npos);

  // Saving step 2 again (e.g. after a restart) works and removes the crash's leftovers.
  testing::SaveSpec spec;
  spec.step = 2;
  ASSERT_TRUE(
      testing::save_ranks(dir.path(), testing::make_ranks(testing::tiny_config(), 3, 8), spec)
          .ok());
  for (const fs::directory_entry& e : fs::directory_iterator(step2)) {
    EXPECT_FALSE(is_temporary_name(e.path().filename().string())) << e.path();
  }
  EXPECT_EQ(CheckpointReader::open(dir.path()).value().manifest().meta.step, 2);
}

}  // namespace
}  // namespace ntp::checkpoint
