#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <memory>
#include <set>

#include "core/rng.h"
#include "data/batcher.h"
#include "data/byte_tokenizer.h"
#include "data/fortunes_corpus.h"
#include "data/token_file.h"
#include "dependency.h"

namespace ntp::data {
namespace {

// A fresh scratch directory per test, removed by the destructor.
class ScratchDir {
 public:
  ScratchDir()
      : path_(std::filesystem::temp_directory_path() /
              ("ntp_train_test_" + std::to_string(::getpid()) + "_" + std::to_string(next_++))) {
    std::filesystem::create_directories(path_);
  }
  ~ScratchDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  std::string file(const std::string& name) const { return (path_ / name).string(); }

 private:
  static inline int next_ = 0;
  std::filesystem::path path_;
};

TEST(ByteTokenizerTest, RoundTripsEveryByte) {
  std::string text;
  for (int i = 0; i < 256; ++i) text.push_back(static_cast<char>(i));
  text += "caf\xc3\xa9";  // UTF-8 survives byte-wise
  const std::vector<uint16_t> tokens = encode_bytes(text);
  ASSERT_EQ(tokens.size(), text.size());
  for (int i = 0; i < 256; ++i) EXPECT_EQ(tokens[static_cast<size_t>(i)], i);
  auto back = decode_bytes(tokens);
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(*back, text);
  const std::vector<uint16_t> bad = {65, 300};
  auto err = decode_bytes(bad);
  EXPECT_EQ(err.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(err.status().message().find("300"), std::string::npos);
  EXPECT_EQ(padded_vocab_size(1), 256);
  EXPECT_EQ(padded_vocab_size(7), 259);
  EXPECT_EQ(padded_vocab_size(64), 256);
}

TEST(TokenFileTest, WritesTheLlmcHeaderAndRoundTrips) {
  ScratchDir dir;
  const std::string path = dir.file("round.bin");
  std::vector<uint16_t> tokens = {0, 1, 255, 65535, 42};
  ASSERT_TRUE(write_token_file(path, tokens).ok());
  EXPECT_EQ(std::filesystem::file_size(path), 1024u + 2 * tokens.size());
  // Check the header bytes independently of the reader.
  std::ifstream in(path, std::ios::binary);
  int32_t header[3];
  in.read(reinterpret_cast<char*>(header), sizeof(header));
  EXPECT_EQ(header[0], 20240520);
  EXPECT_EQ(header[1], 1);
  EXPECT_EQ(header[2], 5);
  auto back = read_token_file(path);
  ASSERT_TRUE(back.ok()) << back.status().to_string();
  EXPECT_EQ(*back, tokens);
}

TEST(TokenFileTest, RejectsMissingTruncatedAndForeignFiles) {
  ScratchDir dir;
  EXPECT_EQ(read_token_file(dir.file("missing.bin")).status().code(), StatusCode::kNotFound);
  const std::string path = dir.file("bad.bin");
  ASSERT_TRUE(write_token_file(path, std::vector<uint16_t>{1, 2, 3}).ok());
  std::filesystem::resize_file(path, 1024 + 4);  // one token short
  auto truncated = read_token_file(path);
  EXPECT_EQ(truncated.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(truncated.status().message().find("3 tokens"), std::string::npos);
  {
    std::fstream f(path, std::ios::binary | std::ios::in | std::ios::out);
    const int32_t wrong = 12345;
    f.write(reinterpret_cast<const char*>(&wrong), 4);
  }
  auto foreign = read_token_file(path);
  EXPECT_EQ(foreign.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(foreign.status().message().find("magic"), std::string::npos);
}

std::shared_ptr<const std::vector<uint16_t>> counting_stream(int64_t n) {
  auto v = std::make_shared<std::vector<uint16_t>>(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) (*v)[static_cast<size_t>(i)] = static_cast<uint16_t>(i % 65536);
  return v;
}

TEST(BatcherTest, TargetsAreInputsShiftedByOne) {
  auto batcher = Batcher::create(counting_stream(1000), 4, 16, 7);
  ASSERT_TRUE(batcher.ok());
  auto batch = batcher->get(3);
  ASSERT_TRUE(batch.ok());
  for (int64_t i = 0; i < 4; ++i) {
    const int64_t start = batcher->offset(3, i);
    EXPECT_LE(start + 16, 999);
    for (int64_t j = 0; j < 16; ++j) {
      EXPECT_EQ(batch->tokens[static_cast<size_t>(i * 16 + j)], start + j);
      EXPECT_EQ(batch->targets[static_cast<size_t>(i * 16 + j)], start + j + 1);
    }
  }
}

TEST(BatcherTest, AnyDataParallelSplitReproducesTheGlobalBatch) {
  auto batcher = Batcher::create(counting_stream(5000), 12, 8, 99);
  ASSERT_TRUE(batcher.ok());
  const Batch global = *batcher->get(5);
  // Uneven splits, as a "scale" policy would give replicas of different speed.
  for (const std::vector<int64_t>& split :
       std::vector<std::vector<int64_t>>{{12}, {6, 6}, {5, 4, 3}, {1, 0, 11}}) {
    std::vector<int32_t> joined;
    int64_t begin = 0;
    for (int64_t count : split) {
      const Batch part = *batcher->get(5, begin, count);
      joined.insert(joined.end(), part.tokens.begin(), part.tokens.end());
      begin += count;
    }
    EXPECT_EQ(joined, global.tokens);
  }
  // A fresh batcher with the same seed agrees; another seed or step differs.
  EXPECT_EQ(Batcher::create(counting_stream(5000), 12, 8, 99)->get(5)->tokens, global.tokens);
  EXPECT_NE(Batcher::create(counting_stream(5000), 12, 8, 100)->get(5)->tokens, global.tokens);
  EXPECT_NE(batcher->get(6)->tokens, global.tokens);
  EXPECT_EQ(batcher->get(5, 10, 3).status().code(), StatusCode::kInvalidArgument);
}

TEST(BatcherTest, OffsetsCoverTheStreamRoughlyUniformly) {
  // 4000 draws over 10 windows-deciles: each decile within 30% of its expectation.
  auto batcher = Batcher::create(counting_stream(1010), 40, 10, 3);
  std::vector<int> bins(10, 0);
  for (int64_t s = 0; s < 100; ++s) {
    for (int64_t i = 0; i < 40; ++i) ++bins[static_cast<size_t>(batcher->offset(s, i) / 100)];
  }
  for (int b : bins) EXPECT_NEAR(b, 400, 120);
  EXPECT_EQ(Batcher::create(counting_stream(8), 1, 8, 1).status().code(),
            StatusCode::kInvalidArgument);
}

TEST(FortunesCorpusTest, LoadsEnglishTextOrSkips) {
  auto text = load_fortunes_text();
  NTP_REQUIRE_DEPENDENCY(text.ok(), text.status().to_string());
  EXPECT_GT(text->size(), 500000u);
  EXPECT_EQ(text->find("\n%\n"), std::string::npos);  // separators removed
  // Mostly printable ASCII and the commonest byte is the space, as in English prose.
  std::vector<int64_t> counts(256, 0);
  for (unsigned char ch : *text) ++counts[ch];
  int64_t best = 0;
  for (int i = 1; i < 256; ++i)
    best = counts[static_cast<size_t>(i)] > counts[static_cast<size_t>(best)] ? i : best;
  EXPECT_EQ(best, ' ');
  EXPECT_EQ(load_fortunes_text("/nonexistent/fortunes").status().code(), StatusCode::kNotFound);
}

}  // namespace
}  // namespace ntp::data
