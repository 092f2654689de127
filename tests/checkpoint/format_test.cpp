// The file format pieces: CRC-32C, safetensors (round trip and strict rejection), piece records
// and manifests (round trip, coverage errors).
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>

#include "checkpoint/crc32c.h"
#include "checkpoint/manifest.h"
#include "checkpoint/manifest_scan.h"
#include "checkpoint/safetensors.h"

namespace ntp::checkpoint {
namespace {

namespace fs = std::filesystem;

std::span<const std::byte> bytes_of(std::string_view s) {
  return std::as_bytes(std::span<const char>(s.data(), s.size()));
}

TEST(Crc32c, KnownValuesAndHardwareAgreesWithPortable) {
  EXPECT_EQ(crc32c(bytes_of("123456789")), 0xE3069283u);
  EXPECT_EQ(crc32c(bytes_of("")), 0u);
  std::string zeros(32, '\0');
  EXPECT_EQ(crc32c(bytes_of(zeros)), 0x8A9136AAu);  // RFC 3720 B.4
  std::mt19937 rng(1);
  // Sizes on both sides of the three-stream threshold (3 x 8 KiB) and with odd tails.
  for (size_t n : {1u, 7u, 8u, 9u, 63u, 4096u, 24575u, 24576u, 24583u, 100003u, 1048576u + 13u}) {
    std::string data(n, '\0');
    for (char& c : data) c = static_cast<char>(rng());
    const uint32_t full = crc32c(bytes_of(data));
    EXPECT_EQ(full, crc32c_extend_portable(0, bytes_of(data))) << n;
    const size_t cut = n / 3;
    EXPECT_EQ(full, crc32c_extend(crc32c(bytes_of(data).first(cut)), bytes_of(data).subspan(cut)));
  }
}

std::string make_file(const std::string& header, const std::string& data) {
  std::string out(8, '\0');
  uint64_t n = header.size();
  std::memcpy(out.data(), &n, 8);
  return out + header + data;
}

TEST(Safetensors, RoundTripAndAtomicWrite) {
  const fs::path path = fs::temp_directory_path() / ("ntp_st_" + std::to_string(::getpid()));
  fs::remove(path);
  const std::vector<float> a = {1, 2, 3, 4, 5, 6}, b = {-1};
  {
    auto w = SafetensorsWriter::create(path, {{"a", {2, 3}}, {"b", {}}}, {{"k", "v"}}).value();
    ASSERT_TRUE(w.write(std::span<const float>(a)).ok());
    EXPECT_FALSE(fs::exists(path));  // nothing under the final name before commit
    EXPECT_EQ(w.commit().code(), StatusCode::kFailedPrecondition);  // b not written yet
  }
  EXPECT_FALSE(fs::exists(path));
  for (const auto& e : fs::directory_iterator(path.parent_path())) {
    EXPECT_EQ(e.path().filename().string().find("ntp_st_" + std::to_string(::getpid())),
              std::string::npos)
        << "left behind: " << e.path();
  }
  auto w = SafetensorsWriter::create(path, {{"a", {2, 3}}, {"b", {}}}, {{"k", "v"}}).value();
  ASSERT_TRUE(w.write(std::span<const float>(a)).ok());
  ASSERT_TRUE(w.write(std::span<const float>(b)).ok());
  ASSERT_TRUE(w.commit().ok());
  const SafetensorsFile f = SafetensorsFile::open(path).value();
  EXPECT_EQ(f.header().data_start() % 8, 0u);
  EXPECT_EQ(f.header().metadata.at("k"), "v");
  const SafetensorsEntry* e = f.header().find("a");
  ASSERT_NE(e, nullptr);
  EXPECT_EQ(e->shape, (std::vector<int64_t>{2, 3}));
  std::vector<float> back(6);
  ASSERT_TRUE(f.read(e->begin, std::as_writable_bytes(std::span<float>(back))).ok());
  EXPECT_EQ(back, a);
  EXPECT_FALSE(f.read(e->begin + 20, std::as_writable_bytes(std::span<float>(back))).ok());
  fs::remove(path);
}

TEST(Safetensors, StrictHeaderRejections) {
  const std::string ok_header =
      R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"U8","shape":[1],"data_offsets":[8,9]}})";
  const std::string data(9, 'x');
  const std::string good = make_file(ok_header, data);
  ASSERT_TRUE(parse_safetensors_header(good, good.size()).ok());
  struct Case {
    std::string file;
    std::string mentions;
  };
  auto with = [&](std::string header) { return make_file(header, data); };
  const std::vector<Case> cases = {
      {good.substr(0, 5), "too short"},
      {good.substr(0, good.size() - 1), "data section"},
      {good + "y", "data section"},
      {std::string("\xff\xff\xff\xff\xff\xff\xff\x7f", 8) + ok_header, "exceeds the file"},
      {with(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]})"), "JSON"},
      {with(R"([1,2])"), "does not start"},
      {with(
           R"({"a":{"dtype":"F33","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"U8","shape":[1],"data_offsets":[8,9]}})"),
       "unknown dtype"},
      {with(
           R"({"a":{"dtype":"F32","shape":[3],"data_offsets":[0,8]},"b":{"dtype":"U8","shape":[1],"data_offsets":[8,9]}})"),
       "need 12"},
      {with(
           R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"U8","shape":[1],"data_offsets":[7,8]}})"),
       "overlap or hole"},
      {with(
           R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"U8","shape":[1],"data_offsets":[9,10]}})"),
       "outside the data section"},
      {with(R"({"a":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}})"), "non-negative"},
      {with(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[8,0]}})"), "outside"},
      {with(R"({"__metadata__":{"k":1},"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})"),
       "__metadata__"},
  };
  for (const Case& c : cases) {
    Result<SafetensorsHeader> r = parse_safetensors_header(c.file, c.file.size());
    ASSERT_FALSE(r.ok()) << c.mentions;
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(r.status().message().find(c.mentions), std::string::npos) << r.status().message();
  }
}

PieceRecord record(std::string tensor, std::vector<int64_t> shape, int axis,
                   std::vector<int64_t> index, std::string file = "shard_0.safetensors") {
  PieceRecord r;
  r.spec = {tensor, "value", shape, axis, index};
  r.file = file;
  r.key = tensor + ":value:" + std::to_string(index.empty() ? -1 : index[0]);
  r.chunk_bytes = 16;
  r.crcs.assign(static_cast<size_t>(chunk_count(local_numel(r.spec) * 4, 16)), 7u);
  return r;
}

TEST(Manifest, RoundTripThroughStrings) {
  ShardRecord s0{"0", "shard_0.safetensors", {}};
  s0.pieces = {record("w", {6, 4}, 0, {5, 0, 1, 2}), record("b", {4}, -1, {})};
  ShardRecord s1{
      "1", "shard_1.safetensors", {record("w", {6, 4}, 0, {4, 3}, "shard_1.safetensors")}};
  ShardRecord back = shard_record_from_string(shard_record_to_string(s0)).value();
  ASSERT_EQ(back.pieces.size(), 2u);
  EXPECT_EQ(back.pieces[0].spec.index, (std::vector<int64_t>{5, 0, 1, 2}));
  EXPECT_EQ(index_to_runs(back.pieces[0].spec.index), (IndexRuns{{5, 6}, {0, 3}}));
  CheckpointMeta meta;
  meta.step = 12;
  meta.rng = {{"seed", 3}};
  const Manifest m = build_manifest(meta, {s0, s1}).value();
  EXPECT_NE(manifest_to_string(m).find("\"index\":[5,[0,3]]"), std::string::npos)
      << "a one-slice run is written as the bare id";
  const Manifest parsed = parse_manifest(manifest_to_string(m)).value();
  EXPECT_EQ(parsed.meta.step, 12);
  EXPECT_EQ(parsed.meta.rng["seed"], 3);
  ASSERT_EQ(parsed.tensors.size(), 2u);
  EXPECT_EQ(parsed.tensors[1].name, "w");
  EXPECT_EQ(parsed.pieces.size(), 3u);
  EXPECT_EQ(parsed.pieces[2].spec.index, (std::vector<int64_t>{4, 3}));
  EXPECT_EQ(manifest_to_string(parsed), manifest_to_string(m));
}

// parse_manifest reads manifest_to_string's own text without a JSON DOM (manifest_scan.h) and
// hands anything else to parse_manifest_dom: on the canonical text and on edits of it that each
// path treats differently (whitespace, a negative zero, escapes, extra or duplicate keys, floats,
// out-of-range numbers, broken JSON), both give the same manifest or the same error.
TEST(Manifest, FastPathAgreesWithTheGeneralParser) {
  ShardRecord s0{"0", "shard_0.safetensors", {}};
  s0.pieces = {record("w", {6, 4}, 0, {5, 0, 1, 2}), record("b", {4}, -1, {})};
  ShardRecord s1{
      "1", "shard_1.safetensors", {record("w", {6, 4}, 0, {4, 3}, "shard_1.safetensors")}};
  CheckpointMeta meta;
  meta.step = 12;
  meta.train_config = {{"note", "a \"quoted\" pieces string"}};
  const std::string good = manifest_to_string(build_manifest(meta, {s0, s1}).value());
  // The canonical text takes the fast path: its pieces array scans whole.
  size_t pos = good.find("\"pieces\": [") + 10;
  const auto fields = scan_pieces(good, &pos);
  ASSERT_TRUE(fields.has_value());
  EXPECT_EQ(fields->size(), 3u);
  EXPECT_EQ(good.find_first_not_of(" \n", pos), good.size() - 2);  // then the closing '}'
  auto edit = [&](const std::string& from, const std::string& to) {
    std::string t = good;
    const size_t at = t.find(from);
    EXPECT_NE(at, std::string::npos) << from;
    return at == std::string::npos ? t : t.replace(at, from.size(), to);
  };
  const std::vector<std::string> texts = {
      good,
      nlohmann::json::parse(good).dump(2),  // another layout of the same JSON
      edit("\"axis\":0", "\"axis\": 0"),
      edit("\"axis\":0", "\"axis\":-0"),
      edit("\"axis\":0", "\"axis\":00"),
      edit("\"axis\":0", "\"axis\":0.0"),
      edit("\"axis\":-1", "\"axis\":- 1"),
      edit("\"axis\":-1", "\"axis\":-1e0"),
      edit("\"chunk_bytes\":16", "\"chunk_bytes\":1.6e1"),
      edit("\"chunk_bytes\":16", "\"chunk_bytes\":99999999999999999999"),
      edit("\"crc32c\":[7", "\"crc32c\":[4294967296"),
      edit("\"kind\":\"value\"", "\"kind\":\"val\\u0075e\""),
      edit("{\"axis\":", "{\"extra\":1,\"axis\":"),
      edit("\"tensor\":\"w\"}", "\"tensor\":\"w\",\"tensor\":\"v\"}"),
      edit("\"rng\": {", "\"pieces\": [],\n \"rng\": {"),
      edit("\"index\":[5,[0,3]]", "\"index\":[5,[0,3,4]]"),
      edit("\"index\":[5,[0,3]]", "\"index\":[5,[3,0]]"),
      edit("\"index\":[5,[0,3]]", "\"index\":[5,[0,2]]"),
      edit("\"logical_shape\":[6,4]", "\"logical_shape\":[6,4,1]"),
      edit("\"file\":\"shard_0", "\"file\":\"shard\t_0"),
      edit("\"step\": 12", "\"step\": 12.5"),
      good + "x",
      good + "}",
      good.substr(0, good.size() - 3),
  };
  int accepted = 0;
  for (const std::string& text : texts) {
    Result<Manifest> fast = parse_manifest(text), dom = parse_manifest_dom(text);
    ASSERT_EQ(fast.ok(), dom.ok()) << text;
    if (fast.ok()) {
      EXPECT_EQ(manifest_to_string(*fast), manifest_to_string(*dom)) << text;
      ++accepted;
    } else {
      EXPECT_EQ(fast.status().message(), dom.status().message()) << text;
    }
  }
  // The canonical text, its re-layout, the added whitespace, -0, the escape, the extra key and the
  // early second "pieces" (the DOM keeps the last of duplicate keys).
  EXPECT_EQ(accepted, 7);
}

TEST(Manifest, CoverageErrorsNameTheTensorAndSlice) {
  struct Case {
    std::vector<PieceRecord> pieces;
    std::string mentions;
  };
  const std::vector<Case> cases = {
      {{record("w", {6, 4}, 0, {0, 1, 2}), record("w", {6, 4}, 0, {4, 5}, "shard_1.safetensors")},
       "tensor w (value): slice 3 along axis 0 is held by no piece"},
      {{record("w", {6, 4}, 0, {0, 1, 2, 3}),
        record("w", {6, 4}, 0, {3, 4, 5}, "shard_1.safetensors")},
       "slice 3 along axis 0 is held by more than one piece"},
      {{record("w", {6, 4}, 0, {0, 1, 2}), record("w", {6, 4}, 1, {0, 1}, "shard_1.safetensors")},
       "along axes 0 and 1"},
      {{record("w", {6, 4}, -1, {}), record("w", {6, 4}, 0, {1}, "shard_1.safetensors")},
       "whole-tensor piece and other pieces"},
      {{record("w", {6, 4}, -1, {}), record("w", {6, 5}, -1, {}, "shard_1.safetensors")},
       "disagree on its logical shape"},
      // A dimension far larger than the pieces hold (the sort-based checks).
      {{record("w", {100000, 1}, 0, {0, 1, 3})}, "slice 2 along axis 0 is held by no piece"},
      {{record("w", {100000, 1}, 0, {0, 1}),
        record("w", {100000, 1}, 0, {1}, "shard_1.safetensors")},
       "slice 1 along axis 0 is held by more than one piece"},
      {{record("w", {100000, 1}, 0, {7, 5, 7})}, "index 7 repeated"},
      {{record("w", {6, 4}, 0, {0, 1, 2, 3, 4, 5, 2})}, "index 2 repeated"},
  };
  for (const Case& c : cases) {
    ShardRecord s{"0", "shard_0.safetensors", c.pieces};
    Result<Manifest> m = build_manifest({}, {s});
    ASSERT_FALSE(m.ok()) << c.mentions;
    EXPECT_NE(m.status().message().find(c.mentions), std::string::npos) << m.status().message();
  }
}

TEST(Manifest, StrictParse) {
  ShardRecord s{"0", "shard_0.safetensors", {record("b", {4}, -1, {})}};
  const std::string good = manifest_to_string(build_manifest({}, {s}).value());
  ASSERT_TRUE(parse_manifest(good).ok());
  auto mutate = [&](const std::string& from, const std::string& to) {
    std::string t = good;
    const size_t at = t.find(from);
    EXPECT_NE(at, std::string::npos) << from;
    return t.replace(at, from.size(), to);
  };
  const std::vector<std::pair<std::string, std::string>> cases = {
      {mutate("ntp-checkpoint", "other"), "format"},
      {mutate("\"version\": 1", "\"version\": 2"), "version"},
      {mutate("\"step\": 0", "\"step\": -1"), "step"},
      {mutate("\"crc32c\":[7]", "\"crc32c\":[7,8]"), "one entry per chunk"},
      {mutate("\"chunk_bytes\":16", "\"chunk_bytes\":6"), "multiple of 4"},
      {mutate("\"file\":\"shard_0.safetensors\"", "\"file\":\"../x\""), "shard_<writer id>"},
      {mutate("\"shape\":[4]", "\"shape\":[\"4\"]"), "bad dimension"},
      {good.substr(0, good.size() / 2), "not a JSON object"},
  };
  for (const auto& [text, mentions] : cases) {
    Result<Manifest> m = parse_manifest(text);
    ASSERT_FALSE(m.ok()) << mentions;
    EXPECT_EQ(m.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(m.status().message().find(mentions), std::string::npos) << m.status().message();
  }
}

}  // namespace
}  // namespace ntp::checkpoint
