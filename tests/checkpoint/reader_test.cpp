// CheckpointReader against real model layouts: written at one TP layout, read at another, bit for
// bit; partial reads touch only the chunks they need; corruption is reported precisely.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <random>

#include "checkpoint/async_shard_writer.h"
#include "checkpoint/checkpoint_dir.h"
#include "checkpoint/model_pieces.h"
#include "checkpoint/reader.h"
#include "ckpt_test_util.h"
#include "temp_dir.h"

namespace ntp::checkpoint {
namespace {

namespace fs = std::filesystem;
using namespace testing;  // the checkpoint fixtures of ckpt_test_util.h and temp_dir.h

bool bitwise_equal(std::span<const float> a, std::span<const float> b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size_bytes()) == 0;
}

std::vector<float> expected_of(std::span<const float> value, const std::string& kind) {
  std::vector<float> out(value.begin(), value.end());
  for (float& v : out) {
    if (kind == "exp_avg") v = testing::fake_exp_avg(v);
    if (kind == "exp_avg_sq") v = testing::fake_exp_avg_sq(v);
  }
  return out;
}

// Every param of every rank of a layout at degree B reads back exactly its own values.
void expect_loads_at(const CheckpointReader& reader, int degree, uint64_t layout_seed) {
  const auto ranks = make_ranks(tiny_config(), degree, layout_seed);
  for (const model::GptModel& rank : ranks) {
    for (const model::Param& p : rank.params()) {
      for (const char* kind : {"value", "exp_avg", "exp_avg_sq"}) {
        std::vector<float> got(static_cast<size_t>(p.value.numel()), -1.0f);
        ASSERT_TRUE(reader.read(param_piece(p, kind), got).ok()) << p.name << " " << kind;
        EXPECT_TRUE(bitwise_equal(got, expected_of(p.value.span(), kind)))
            << p.name << " " << kind << " at degree " << degree;
      }
    }
  }
}

TEST(CheckpointReader, AnyLayoutToAnyLayoutBitForBit) {
  std::mt19937 rng(11);
  for (int trial = 0; trial < 6; ++trial) {
    TempDir dir;
    const int a = 1 + static_cast<int>(rng() % 4);
    const uint64_t seed_a = rng() % 3;  // 0 = contiguous
    SaveSpec spec;
    spec.split_replicated = trial % 2 == 1;
    spec.write_options.chunk_bytes = trial % 3 == 0 ? 64 : 4096;  // many chunks per piece
    ASSERT_TRUE(save_ranks(dir.path(), make_ranks(tiny_config(), a, seed_a), spec).ok());
    Result<CheckpointReader> reader = CheckpointReader::open(dir.path());
    ASSERT_TRUE(reader.ok()) << reader.status().to_string();
    for (int b : {1, 3, 4}) {
      SCOPED_TRACE("written at " + std::to_string(a) + ", read at " + std::to_string(b));
      expect_loads_at(*reader, b, 100 + rng() % 50);
    }
  }
}

// Requests along any axis, with random subsets in random order, including axes the pieces were
// not split along (the cross-axis path) and whole tensors.
TEST(CheckpointReader, RandomRequestsOnEveryAxis) {
  TempDir dir;
  SaveSpec spec;
  spec.split_replicated = true;
  spec.write_options.chunk_bytes = 128;
  ASSERT_TRUE(save_ranks(dir.path(), make_ranks(tiny_config(), 3, 5), spec).ok());
  const CheckpointReader reader = CheckpointReader::open(dir.path()).value();
  const auto logical = make_ranks(tiny_config(), 1, 0);
  std::mt19937 rng(3);
  for (const model::Param& p : logical[0].params()) {
    for (int axis = -1; axis < static_cast<int>(p.logical_shape.size()); ++axis) {
      model::Param want = p;
      want.shard_axis = axis;
      want.logical_index.clear();
      if (axis >= 0) {
        std::vector<int64_t> all(static_cast<size_t>(p.logical_shape[static_cast<size_t>(axis)]));
        std::iota(all.begin(), all.end(), 0);
        std::shuffle(all.begin(), all.end(), rng);
        all.resize(1 + rng() % all.size());
        want.logical_index = all;
      }
      std::vector<float> expected(static_cast<size_t>(shape_numel(want.local_shape())));
      want.gather_from_logical(p.value.span(), expected);
      std::vector<float> got(expected.size(), -7.0f);
      ASSERT_TRUE(reader.read(param_piece(want, "value"), got).ok()) << p.name;
      EXPECT_TRUE(bitwise_equal(got, expected)) << p.name << " axis " << axis;
    }
  }
}

// Columns dealt at random to 2 writers, read back by 3 other random column sets: thousands of
// one-column runs in every row (the reader's gather path), and also whole.
TEST(CheckpointReader, ManyShortRunsAcrossRows) {
  TempDir dir;
  const std::vector<int64_t> shape = {64, 512};
  std::vector<float> logical(64 * 512);
  for (size_t i = 0; i < logical.size(); ++i) logical[i] = static_cast<float>(i) * 0.5f;
  std::vector<int64_t> cols(512);
  std::iota(cols.begin(), cols.end(), 0);
  std::mt19937 rng(5);
  std::shuffle(cols.begin(), cols.end(), rng);
  auto gather = [&](const std::vector<int64_t>& index) {
    std::vector<float> local;
    for (int64_t r = 0; r < 64; ++r) {
      for (int64_t c : index) local.push_back(logical[static_cast<size_t>(r * 512 + c)]);
    }
    return local;
  };
  const fs::path step = prepare_step_dir(dir.path(), 1).value();
  std::vector<ShardRecord> records;
  for (int w = 0; w < 2; ++w) {
    const std::vector<int64_t> index(cols.begin() + w * 256, cols.begin() + (w + 1) * 256);
    const std::vector<float> data = gather(index);
    const PieceView view{{"w", "value", shape, 1, index}, data};
    records.push_back(
        write_shard(step, std::to_string(w), std::span<const PieceView>(&view, 1)).value());
  }
  CheckpointMeta meta;
  meta.step = 1;
  ASSERT_TRUE(commit_checkpoint(dir.path(), meta, records).ok());
  const CheckpointReader reader = CheckpointReader::open(dir.path()).value();
  std::shuffle(cols.begin(), cols.end(), rng);
  for (int r = 0; r < 3; ++r) {
    const std::vector<int64_t> index(cols.begin() + r * 170, cols.begin() + (r + 1) * 170);
    std::vector<float> got(64 * 170);
    ASSERT_TRUE(reader.read({"w", "value", shape, 1, index}, got).ok());
    EXPECT_TRUE(bitwise_equal(got, gather(index))) << "rank " << r;
  }
  std::vector<float> whole(logical.size());
  ASSERT_TRUE(reader.read({"w", "value", shape, -1, {}}, whole).ok());
  EXPECT_TRUE(bitwise_equal(whole, logical));
}

// read_all of the state of three ranks of another shuffled layout (plus a whole-tensor request
// and one along another axis) in one pass: every value bit for bit, and each stored chunk read
// and CRC-checked exactly once, the manifest's chunk count, however many requests share it.
TEST(CheckpointReader, ReadAllReadsEachChunkOnce) {
  TempDir dir;
  const model::GptConfig config = tiny_config();
  SaveSpec spec;
  spec.write_options.chunk_bytes = 64;  // many chunks per piece, most shared by several ranks
  const Manifest manifest = save_ranks(dir.path(), make_ranks(config, 4, 5), spec).value();
  int64_t chunks = 0, bytes = 0;
  for (const PieceRecord& p : manifest.pieces) {
    chunks += static_cast<int64_t>(p.crcs.size());
    bytes += local_numel(p.spec) * 4;
  }
  const CheckpointReader reader = CheckpointReader::open(dir.path()).value();
  const auto ranks = make_ranks(config, 3, 9);
  std::vector<CheckpointReader::Request> requests;
  std::vector<std::vector<float>> got, want;
  for (const model::GptModel& rank : ranks) {
    for (const model::Param& p : rank.params()) {
      for (const char* kind : {"value", "exp_avg", "exp_avg_sq"}) {
        got.emplace_back(static_cast<size_t>(p.value.numel()), -1.0f);
        want.push_back(expected_of(p.value.span(), kind));
        requests.push_back({param_piece(p, kind), {}});
      }
    }
  }
  // c_fc.weight [16, 64] is stored along axis 1: ask for rows 3 and 0 (along axis 0), alongside
  // the requests above.
  const auto& params0 = ranks[0].params();
  const model::Param& fc = *std::find_if(params0.begin(), params0.end(), [](const model::Param& p) {
    return p.name == "transformer.h.0.mlp.c_fc.weight";
  });
  ASSERT_EQ(fc.shard_axis, 1);
  std::vector<float> fc_logical(static_cast<size_t>(shape_numel(fc.logical_shape)));
  for (const model::GptModel& rank : ranks) {
    for (const model::Param& p : rank.params()) {
      if (p.name == fc.name) p.scatter_to_logical(p.value.span(), fc_logical);
    }
  }
  requests.push_back({{fc.name, "value", fc.logical_shape, 0, {3, 0}}, {}});
  got.emplace_back(2 * 64);
  want.emplace_back(fc_logical.begin() + 3 * 64, fc_logical.begin() + 4 * 64);
  want.back().insert(want.back().end(), fc_logical.begin(), fc_logical.begin() + 64);
  // The whole of c_fc.weight too (its logical tensor is the three ranks' values scattered).
  requests.push_back({{fc.name, "value", fc.logical_shape, -1, {}}, {}});
  got.emplace_back(fc_logical.size());
  want.push_back(fc_logical);
  for (size_t i = 0; i < requests.size(); ++i) requests[i].out = got[i];
  ASSERT_TRUE(reader.read_all(requests).ok());
  for (size_t i = 0; i < requests.size(); ++i) {
    EXPECT_TRUE(bitwise_equal(got[i], want[i])) << piece_name(requests[i].spec);
  }
  EXPECT_EQ(reader.chunks_verified(), chunks);
  EXPECT_EQ(reader.bytes_read(), bytes);
}

TEST(CheckpointReader, PartialReadTouchesOnlyItsChunks) {
  TempDir dir;
  const model::GptConfig config = tiny_config();
  SaveSpec spec;
  spec.moments = false;
  spec.write_options.chunk_bytes = 64;  // one row of wte (16 floats) per chunk
  ASSERT_TRUE(save_ranks(dir.path(), make_ranks(config, 1, 0), spec).ok());
  const CheckpointReader reader = CheckpointReader::open(dir.path()).value();
  PieceSpec rows{
      "transformer.wte.weight", "value", {config.vocab_size, config.n_embd}, 0, {7, 8, 9, 200}};
  std::vector<float> out(4 * 16);
  ASSERT_TRUE(reader.read(rows, out).ok());
  EXPECT_EQ(reader.chunks_verified(), 4);
  EXPECT_EQ(reader.bytes_read(), 4 * 64);
}

// Flips one byte of the data of one piece: the read fails naming file, tensor and chunk, and
// verify_all finds it too; reads of other tensors still work.
TEST(CheckpointReader, ChecksumMismatchNamesFileTensorAndChunk) {
  TempDir dir;
  SaveSpec spec;
  spec.write_options.chunk_bytes = 256;
  ASSERT_TRUE(save_ranks(dir.path(), make_ranks(tiny_config(), 2, 0), spec).ok());
  CheckpointReader reader = CheckpointReader::open(dir.path()).value();
  const PieceRecord* target = nullptr;
  for (const PieceRecord& p : reader.manifest().pieces) {
    if (p.spec.tensor == "transformer.h.1.mlp.c_fc.weight" && p.spec.kind == "exp_avg") target = &p;
  }
  ASSERT_NE(target, nullptr);
  const fs::path file = reader.step_dir() / target->file;
  const SafetensorsFile st = SafetensorsFile::open(file).value();
  const uint64_t at = st.header().data_start() + st.header().find(target->key)->begin + 300;
  {
    std::fstream f(file, std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(static_cast<std::streamoff>(at));
    char c = 0;
    f.read(&c, 1);
    c = static_cast<char>(c ^ 0x10);
    f.seekp(static_cast<std::streamoff>(at));
    f.write(&c, 1);
  }
  const PieceSpec whole{target->spec.tensor, "exp_avg", target->spec.logical_shape, -1, {}};
  std::vector<float> out(static_cast<size_t>(local_numel(whole)));
  const Status s = reader.read(whole, out);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find(target->file), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("transformer.h.1.mlp.c_fc.weight (exp_avg)"), std::string::npos);
  EXPECT_NE(s.message().find("chunk 1 of"), std::string::npos) << s.message();
  EXPECT_EQ(reader.verify_all().code(), StatusCode::kInvalidArgument);
  const PieceSpec other{target->spec.tensor, "value", target->spec.logical_shape, -1, {}};
  EXPECT_TRUE(reader.read(other, out).ok());
}

TEST(CheckpointReader, BadRequests) {
  TempDir dir;
  ASSERT_TRUE(save_ranks(dir.path(), make_ranks(tiny_config(), 2, 0), {}).ok());
  const CheckpointReader reader = CheckpointReader::open(dir.path()).value();
  std::vector<float> out(16);
  EXPECT_EQ(reader.read({"transformer.nope", "value", {16}, -1, {}}, out).code(),
            StatusCode::kNotFound);
  EXPECT_EQ(reader.read({"transformer.ln_f.weight", "value", {15}, -1, {}}, out).code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(reader.read({"transformer.ln_f.weight", "value", {16}, 0, {1, 1}}, out).code(),
            StatusCode::kInvalidArgument);
  std::vector<float> small(3);
  EXPECT_EQ(reader.read({"transformer.ln_f.weight", "value", {16}, -1, {}}, small).code(),
            StatusCode::kInvalidArgument);
}

TEST(CheckpointReader, DirectoryWithoutManifestIsNotACheckpoint) {
  TempDir dir;
  fs::create_directories(dir.path() / "step_00000001");
  Result<CheckpointReader> r = CheckpointReader::open(dir.path() / "step_00000001");
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("not a checkpoint"), std::string::npos);
}

// The asynchronous writer produces the same files and records as the synchronous one; the
// snapshot is independent of later changes to the source.
TEST(AsyncShardWriter, WritesSnapshotsInOrder) {
  TempDir dir;
  auto ranks = make_ranks(tiny_config(), 2, 3);
  SaveSpec spec;
  AsyncShardWriter writer;
  std::vector<ShardRecord> records;
  const fs::path step = prepare_step_dir(dir.path(), 1).value();
  for (size_t r = 0; r < ranks.size(); ++r) {
    auto pieces = testing::rank_pieces(ranks, r, spec);
    writer.start(step, std::to_string(r), Snapshot::copy_of(pieces.views).value());
    for (auto& d : pieces.data) std::fill(d.begin(), d.end(), 0.0f);  // training moves on
  }
  for (size_t r = 0; r < ranks.size(); ++r) {
    Result<ShardRecord> rec = writer.wait();
    ASSERT_TRUE(rec.ok()) << rec.status().to_string();
    EXPECT_EQ(rec->writer, std::to_string(r));
    records.push_back(*rec);
  }
  EXPECT_EQ(writer.wait().status().code(), StatusCode::kFailedPrecondition);
  CheckpointMeta meta;
  meta.step = 1;
  ASSERT_TRUE(commit_checkpoint(dir.path(), meta, records).ok());
  const CheckpointReader reader = CheckpointReader::open(dir.path()).value();
  EXPECT_TRUE(reader.verify_all().ok());
  expect_loads_at(reader, 3, 9);
}

// A finished save's snapshot memory is reused by the next snapshot of the same writer, and the
// reused buffer holds the new data.
TEST(AsyncShardWriter, SnapshotReusesTheFinishedSavesMemory) {
  TempDir dir;
  auto ranks = make_ranks(tiny_config(), 1, 0);
  auto pieces = testing::rank_pieces(ranks, 0, {});
  AsyncShardWriter writer;
  Snapshot first = writer.snapshot(pieces.views).value();
  const float* memory = first.views()[0].data.data();
  writer.start(prepare_step_dir(dir.path(), 1).value(), "0", std::move(first));
  ASSERT_TRUE(writer.wait().ok());
  for (auto& d : pieces.data) std::fill(d.begin(), d.end(), 0.5f);  // the state moved on
  Snapshot second = writer.snapshot(pieces.views).value();
  EXPECT_EQ(second.views()[0].data.data(), memory);
  writer.start(prepare_step_dir(dir.path(), 2).value(), "0", std::move(second));
  const ShardRecord record = writer.wait().value();
  CheckpointMeta meta;
  meta.step = 2;
  ASSERT_TRUE(commit_checkpoint(dir.path(), meta, {record}).ok());
  const CheckpointReader reader = CheckpointReader::open(dir.path()).value();
  for (const PieceView& v : pieces.views) {
    std::vector<float> got(v.data.size());
    ASSERT_TRUE(reader.read(v.spec, got).ok());
    EXPECT_TRUE(bitwise_equal(got, v.data)) << piece_name(v.spec);
  }
}

}  // namespace
}  // namespace ntp::checkpoint
