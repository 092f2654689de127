// The commit protocol: manifest last, `latest` after it, keep-last-K pruning, stale files.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "checkpoint/checkpoint_dir.h"
#include "checkpoint/reader.h"
#include "ckpt_test_util.h"
#include "temp_dir.h"

namespace ntp::checkpoint {
namespace {

namespace fs = std::filesystem;
using namespace testing;  // the checkpoint fixtures of ckpt_test_util.h and temp_dir.h

TEST(Commit, LatestFollowsAndKeepLastPrunes) {
  TempDir dir;
  const auto ranks = make_ranks(tiny_config(), 2, 1);
  for (int64_t step : {10, 20, 30, 40}) {
    SaveSpec spec;
    spec.step = step;
    spec.keep_last = 2;
    ASSERT_TRUE(save_ranks(dir.path(), ranks, spec).ok());
    EXPECT_EQ(testing::read_all(dir.path() / "latest"), step_dir_path("", step).string() + "\n");
  }
  EXPECT_EQ(complete_steps(dir.path()), (std::vector<int64_t>{30, 40}));
  const CheckpointReader reader = CheckpointReader::open(dir.path()).value();
  EXPECT_EQ(reader.manifest().meta.step, 40);
  EXPECT_EQ(reader.manifest().meta.data["position"], 40000);
  EXPECT_EQ(reader.manifest().meta.model_config["n_embd"], 16);
}

TEST(Commit, StaleIncompleteDirsAndFilesAreRemoved) {
  TempDir dir;
  const auto ranks = make_ranks(tiny_config(), 2, 1);
  // A crashed attempt at step 5 left a shard of a writer that will not exist later, and a
  // temporary file.
  const fs::path step5 = prepare_step_dir(dir.path(), 5).value();
  std::ofstream(step5 / "shard_7.safetensors") << "junk";
  std::ofstream(step5 / ".tmp.shard_0.safetensors.1.0") << "junk";
  const fs::path step3 = prepare_step_dir(dir.path(), 3).value();  // older, never finished
  SaveSpec spec;
  spec.step = 5;
  ASSERT_TRUE(save_ranks(dir.path(), ranks, spec).ok());
  EXPECT_FALSE(fs::exists(step5 / "shard_7.safetensors"));
  EXPECT_FALSE(fs::exists(step5 / ".tmp.shard_0.safetensors.1.0"));
  EXPECT_FALSE(fs::exists(step3));
  EXPECT_TRUE(CheckpointReader::open(dir.path()).value().verify_all().ok());
  // A complete step is never overwritten.
  EXPECT_EQ(prepare_step_dir(dir.path(), 5).status().code(), StatusCode::kAlreadyExists);
  EXPECT_EQ(save_ranks(dir.path(), ranks, spec).status().code(), StatusCode::kAlreadyExists);
}

TEST(Commit, RefusesRecordsWithoutTheirFilesOrCoverage) {
  TempDir dir;
  const auto ranks = make_ranks(tiny_config(), 2, 1);
  const fs::path step = prepare_step_dir(dir.path(), 1).value();
  SaveSpec spec;
  const auto pieces0 = testing::rank_pieces(ranks, 0, spec);
  ShardRecord r0 = write_shard(step, "0", pieces0.views).value();
  CheckpointMeta meta;
  meta.step = 1;
  // Rank 1's pieces are missing: coverage fails, naming a tensor.
  Result<Manifest> m = commit_checkpoint(dir.path(), meta, {r0});
  EXPECT_EQ(m.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(m.status().message().find("held by no piece"), std::string::npos)
      << m.status().message();
  // Rank 1's record without its file.
  const auto pieces1 = testing::rank_pieces(ranks, 1, spec);
  ShardRecord r1 = write_shard(step, "1", pieces1.views).value();
  fs::remove(step / r1.file);
  m = commit_checkpoint(dir.path(), meta, {r0, r1});
  EXPECT_FALSE(m.ok());
  EXPECT_NE(m.status().message().find("shard_1.safetensors"), std::string::npos);
  EXPECT_FALSE(is_complete_step_dir(step));
  EXPECT_FALSE(fs::exists(dir.path() / "latest"));
}

TEST(Commit, LatestNamingAnIncompleteDirIsAnError) {
  TempDir dir;
  fs::create_directories(dir.path() / "step_00000002");
  std::ofstream(dir.path() / "latest") << "step_00000002\n";
  Result<CheckpointReader> r = CheckpointReader::open(dir.path());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("no manifest.json"), std::string::npos);
}

}  // namespace
}  // namespace ntp::checkpoint
