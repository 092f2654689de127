// End-to-end tests of `ntp ckpt` through the real binary: inspect, verify, consolidate, and
// every kind of bad input (exit 2, one stderr line naming the file and tensor, nothing
// overwritten).
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "checkpoint/checkpoint_dir.h"
#include "checkpoint/safetensors.h"
#include "child_process.h"
#include "ckpt_test_util.h"
#include "temp_dir.h"

namespace ntp::checkpoint {
namespace {

namespace fs = std::filesystem;
using testing::TempDir;

ntp::testing::CommandOutput ntp(std::vector<std::string> args) {
  args.insert(args.begin(), NTP_BINARY);
  return ntp::testing::run_command(args);
}

// A checkpoint at step 42 written by 3 ranks; returns its step directory.
fs::path save(const fs::path& save_dir) {
  testing::SaveSpec spec;
  spec.step = 42;
  spec.write_options.chunk_bytes = 256;
  EXPECT_TRUE(
      testing::save_ranks(save_dir, testing::make_ranks(testing::tiny_config(), 3, 2), spec).ok());
  return step_dir_path(save_dir, 42);
}

void expect_bad_input(const ntp::testing::CommandOutput& r,
                      const std::vector<std::string>& mentions) {
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_TRUE(r.out.empty()) << r.out;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  for (const std::string& m : mentions) EXPECT_NE(r.err.find(m), std::string::npos) << r.err;
}

TEST(NtpCkpt, InspectTextAndJson) {
  TempDir dir;
  const fs::path step = save(dir.path());
  auto text = ntp({"ckpt", "inspect", dir.path().string()});
  ASSERT_EQ(text.exit_code, 0) << text.err;
  EXPECT_NE(text.out.find("(step 42)"), std::string::npos) << text.out;
  EXPECT_NE(text.out.find("writers: 3"), std::string::npos) << text.out;
  EXPECT_NE(text.out.find("transformer.h.1.attn.c_attn.weight"), std::string::npos);
  auto json_out = ntp({"ckpt", "inspect", step.string(), "--json"});
  ASSERT_EQ(json_out.exit_code, 0) << json_out.err;
  const auto doc = nlohmann::json::parse(json_out.out);
  EXPECT_EQ(doc["step"], 42);
  EXPECT_EQ(doc["files"].size(), 3u);
  EXPECT_EQ(doc["layout"]["tp_degree"], 3);
  EXPECT_EQ(doc["model_config"]["vocab_size"], 260);
  bool found = false;
  for (const auto& t : doc["tensors"]) {
    if (t["name"] != "transformer.h.0.attn.c_attn.weight") continue;
    found = true;
    EXPECT_EQ(t["shape"], nlohmann::json({16, 48}));
    EXPECT_EQ(t["kinds"]["value"]["axis"], 1);
    EXPECT_EQ(t["kinds"]["value"]["pieces"].size(), 3u);
    EXPECT_TRUE(t["kinds"].contains("exp_avg_sq"));
  }
  EXPECT_TRUE(found);
}

TEST(NtpCkpt, VerifyGoodAndCorrupted) {
  TempDir dir;
  const fs::path step = save(dir.path());
  auto ok = ntp({"ckpt", "verify", dir.path().string()});
  EXPECT_EQ(ok.exit_code, 0) << ok.err;
  EXPECT_NE(ok.out.find("ok: "), std::string::npos);

  // Flip one data byte of shard_2: verify names the file, the tensor and the chunk.
  const fs::path shard = step / "shard_2.safetensors";
  const SafetensorsFile st = SafetensorsFile::open(shard).value();
  const SafetensorsEntry& last = st.header().entries.back();
  std::string bytes = testing::read_all(shard);
  bytes[st.header().data_start() + last.begin + 5] ^= 0x40;
  std::ofstream(shard, std::ios::binary | std::ios::trunc) << bytes;
  const std::string tensor = last.name.substr(0, last.name.find(':'));
  expect_bad_input(ntp({"ckpt", "verify", dir.path().string()}),
                   {"shard_2.safetensors", tensor, "chunk 0 of", "checksum"});
  // Inspect reads no data: still fine.
  EXPECT_EQ(ntp({"ckpt", "inspect", dir.path().string()}).exit_code, 0);

  // Truncated file: the header no longer matches the file size.
  bytes.resize(bytes.size() - 100);
  std::ofstream(shard, std::ios::binary | std::ios::trunc) << bytes;
  expect_bad_input(ntp({"ckpt", "verify", dir.path().string()}),
                   {"shard_2.safetensors", "data section", "holds tensor"});

  // Missing file.
  fs::remove(shard);
  expect_bad_input(ntp({"ckpt", "inspect", dir.path().string()}),
                   {"shard_2.safetensors: missing", "holds tensor"});
}

TEST(NtpCkpt, MissingPieceAndNotACheckpoint) {
  TempDir dir;
  const fs::path step = save(dir.path());
  // Drop the manifest line of rank 0's piece of wte (not the last line, so the JSON stays
  // valid): coverage fails naming the tensor and a slice.
  std::string manifest = testing::read_all(step / "manifest.json");
  const size_t at = manifest.find("{\"axis\":0,\"chunk_bytes\":256,\"crc32c\"");
  ASSERT_NE(at, std::string::npos);
  const size_t end = manifest.find('\n', at);
  manifest.erase(at, end - at + 1);
  std::ofstream(step / "manifest.json", std::ios::trunc) << manifest;
  expect_bad_input(ntp({"ckpt", "verify", step.string()}),
                   {"manifest.json", "transformer.wte.weight (value)", "held by no piece"});

  const fs::path empty = dir.path() / "empty";
  fs::create_directories(empty);
  expect_bad_input(ntp({"ckpt", "verify", empty.string()}), {"not a checkpoint"});
  expect_bad_input(ntp({"ckpt", "inspect", (dir.path() / "nope").string()}), {"not a directory"});
}

TEST(NtpCkpt, ConsolidateWritesHfFilesAndNeverOverwrites) {
  TempDir dir;
  save(dir.path());
  const fs::path out = dir.path() / "hf";
  auto r = ntp({"ckpt", "consolidate", dir.path().string(), "--out", out.string()});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const SafetensorsFile model = SafetensorsFile::open(out / "model.safetensors").value();
  EXPECT_EQ(model.header().entries.size(), 4u + 2u * 12u);
  ASSERT_NE(model.header().find("transformer.wte.weight"), nullptr);
  EXPECT_EQ(model.header().find("transformer.wte.weight")->shape, (std::vector<int64_t>{260, 16}));
  EXPECT_EQ(model.header().find("lm_head.weight"), nullptr);  // tied to wte
  const auto config = nlohmann::json::parse(testing::read_all(out / "config.json"));
  EXPECT_EQ(config["model_type"], "gpt2");
  EXPECT_EQ(config["architectures"][0], "GPT2LMHeadModel");
  EXPECT_EQ(config["n_inner"], 64);
  EXPECT_EQ(config["n_positions"], 8);
  EXPECT_EQ(config["tie_word_embeddings"], true);

  // OUT exists and is not empty: refused, untouched.
  const std::string before = testing::read_all(out / "model.safetensors");
  expect_bad_input(ntp({"ckpt", "consolidate", dir.path().string(), "--out", out.string()}),
                   {out.string(), "--force"});
  EXPECT_EQ(testing::read_all(out / "model.safetensors"), before);
  // --force replaces it.
  EXPECT_EQ(
      ntp({"ckpt", "consolidate", dir.path().string(), "--out", out.string(), "--force"}).exit_code,
      0);
  // An empty OUT is fine.
  const fs::path empty_out = dir.path() / "empty_out";
  fs::create_directories(empty_out);
  EXPECT_EQ(
      ntp({"ckpt", "consolidate", dir.path().string(), "--out", empty_out.string()}).exit_code, 0);
  EXPECT_TRUE(fs::exists(empty_out / "config.json"));

  // A corrupted checkpoint: exit 2, and neither a new OUT nor a forced one is written.
  // (consolidate reads only "value" pieces, so corrupt one of those.)
  const fs::path shard = step_dir_path(dir.path(), 42) / "shard_0.safetensors";
  const SafetensorsFile st = SafetensorsFile::open(shard).value();
  std::string bytes = testing::read_all(shard);
  bytes[st.header().data_start() + st.header().find("transformer.wte.weight:value")->begin + 9] ^=
      1;
  std::ofstream(shard, std::ios::binary | std::ios::trunc) << bytes;
  const fs::path out2 = dir.path() / "hf2";
  expect_bad_input(ntp({"ckpt", "consolidate", dir.path().string(), "--out", out2.string()}),
                   {"shard_0.safetensors", "transformer.wte.weight (value)", "checksum"});
  EXPECT_FALSE(fs::exists(out2));
  expect_bad_input(
      ntp({"ckpt", "consolidate", dir.path().string(), "--out", out.string(), "--force"}),
      {"shard_0.safetensors"});
  EXPECT_EQ(testing::read_all(out / "model.safetensors"), before);
  for (const auto& e : fs::directory_iterator(dir.path())) {
    EXPECT_EQ(e.path().filename().string().rfind(".tmp.", 0), std::string::npos) << e.path();
  }
}

}  // namespace
}  // namespace ntp::checkpoint
