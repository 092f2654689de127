// The spread rule (checkpoint/spread.h): the shares of all writers partition every tensor, and a
// checkpoint written by every rank of three replicas of different degrees and layouts, each its
// share, holds every element exactly once, has every writer writing, and loads bit for bit at
// other layouts.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <random>

#include "checkpoint/checkpoint_dir.h"
#include "checkpoint/model_pieces.h"
#include "checkpoint/reader.h"
#include "checkpoint/spread.h"
#include "ckpt_test_util.h"
#include "temp_dir.h"

namespace ntp::checkpoint {
namespace {

using testing::make_ranks;
using testing::TempDir;
using testing::tiny_config;

// How many writers' shares hold each unit (sharded) or row (replicated) of [0, n).
std::vector<int> share_counts(int64_t n, const std::vector<int>& degrees, bool replicated,
                              const std::string& key, int64_t bytes, const SpreadOptions& o) {
  std::vector<int> count(static_cast<size_t>(n), 0);
  for (size_t r = 0; r < degrees.size(); ++r) {
    // A sharded share is the replica's (each of its ranks writes the units it holds of it).
    const int writers = replicated ? degrees[r] : (degrees[r] > 0 ? 1 : 0);
    for (int t = 0; t < writers; ++t) {
      const SpreadSlot slot{static_cast<int>(r), t, degrees};
      const IndexRuns runs = replicated ? replicated_share(key, n, bytes, slot, o)
                                        : sharded_share(key, n, bytes, slot, o);
      for (const auto& [b, e] : runs) {
        for (int64_t u = b; u < e; ++u) ++count[static_cast<size_t>(u)];
      }
    }
  }
  return count;
}

TEST(Spread, SharesPartitionEveryTensor) {
  std::mt19937 rng(3);
  const SpreadOptions o{.min_part_bytes = 100};
  for (int trial = 0; trial < 300; ++trial) {
    std::vector<int> degrees(1 + rng() % 6);
    for (int& d : degrees) d = static_cast<int>(rng() % 5);  // 0: a replica with no live rank
    degrees[rng() % degrees.size()] = 1 + static_cast<int>(rng() % 4);
    const int64_t n = 1 + static_cast<int64_t>(rng() % 40);
    const int64_t bytes = static_cast<int64_t>(rng() % 5000);
    const std::string key = "t" + std::to_string(trial) + ":value";
    for (bool replicated : {false, true}) {
      const std::vector<int> count = share_counts(n, degrees, replicated, key, bytes, o);
      for (int64_t u = 0; u < n; ++u) {
        ASSERT_EQ(count[static_cast<size_t>(u)], 1)
            << (replicated ? "row " : "unit ") << u << " of " << n << ", trial " << trial;
      }
    }
  }
}

// A tensor below the minimum part stays in one part; a large one is cut into one part per
// replica (sharded) or per writer (replicated).
TEST(Spread, PartsFollowTheMinimumSize) {
  const std::vector<int> degrees = {4, 3, 2};
  const SpreadOptions o{.min_part_bytes = 1000};
  int small_writers = 0, large_writers = 0;
  for (size_t r = 0; r < degrees.size(); ++r) {
    for (int t = 0; t < degrees[r]; ++t) {
      const SpreadSlot slot{static_cast<int>(r), t, degrees};
      small_writers += replicated_share("ln:value", 64, 999, slot, o).empty() ? 0 : 1;
      large_writers += replicated_share("wpe:value", 64, 9000, slot, o).empty() ? 0 : 1;
    }
  }
  EXPECT_EQ(small_writers, 1);
  EXPECT_EQ(large_writers, 9);  // 9 parts of >= 1000 bytes, one per writer
  int replicas = 0;
  for (size_t r = 0; r < degrees.size(); ++r) {
    replicas +=
        sharded_share("fc:value", 32, 3000, {static_cast<int>(r), 0, degrees}, o).empty() ? 0 : 1;
  }
  EXPECT_EQ(replicas, 3);
}

// A strided view: rows of row_floats every row_stride floats; a size that does not match is
// refused naming the piece, and a good one is written as its gathered rows.
TEST(Spread, StridedViewsAreCheckedAndGathered) {
  TempDir dir;
  const std::vector<float> storage = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11};  // [3, 4]
  // Columns 1-2 of the [3, 4] array: a [3, 2] piece of logical [3, 4] along axis 1.
  const PieceSpec spec{"w", "value", {3, 4}, 1, {1, 2}};
  const std::span<const float> from_1(storage.data() + 1, 10);  // ends with the last row's col 2
  const PieceView good{spec, from_1, 2, 4};
  const PieceView bad{spec, from_1.first(9), 2, 4};
  EXPECT_EQ(write_shard(dir.path(), "0", std::span<const PieceView>(&bad, 1)).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(Snapshot::copy_of(std::span<const PieceView>(&bad, 1)).status().code(),
            StatusCode::kInvalidArgument);
  const Snapshot snap = Snapshot::copy_of(std::span<const PieceView>(&good, 1)).value();
  const std::vector<float> want = {1, 2, 5, 6, 9, 10};
  ASSERT_EQ(snap.views()[0].data.size(), want.size());
  EXPECT_TRUE(std::equal(want.begin(), want.end(), snap.views()[0].data.begin()));
}

struct Writer {
  std::string id;
  std::vector<std::vector<float>> data;  // moments, owned
  std::vector<PieceView> views;
};

float fake(const std::string& kind, float v) {
  if (kind == "exp_avg") return testing::fake_exp_avg(v);
  if (kind == "exp_avg_sq") return testing::fake_exp_avg_sq(v);
  return v;
}

// Replicas {4 contiguous, 3 shuffled, 2 shuffled} of one model, every rank writing its share of
// value, exp_avg and exp_avg_sq (strided views for c_attn and c_fc): each element exactly once
// (counted per element here, and by the commit's coverage check), every writer writing, and the
// checkpoint read back bit for bit at degree 3 (another shuffle), 1 and 4 (contiguous).
TEST(Spread, EveryRankOfEveryReplicaWritesItsShareOnce) {
  TempDir dir;
  const model::GptConfig config = tiny_config();
  const std::vector<int> degrees = {4, 3, 2};
  const uint64_t layouts[] = {0, 3, 5};
  const SpreadOptions o{.min_part_bytes = 256};  // tiny tensors, cut into many parts
  const char* kinds[] = {"value", "exp_avg", "exp_avg_sq"};
  std::vector<std::vector<model::GptModel>> replicas;
  for (size_t r = 0; r < degrees.size(); ++r) {
    replicas.push_back(make_ranks(config, degrees[r], layouts[r]));
  }
  // Moments are functions of the value, stored per (replica, rank, param, kind) so views can
  // borrow them.
  std::vector<Writer> writers;
  for (size_t r = 0; r < replicas.size(); ++r) {
    for (size_t t = 0; t < replicas[r].size(); ++t) {
      Writer& w = writers.emplace_back();
      w.id = std::to_string(r) + "_" + std::to_string(t);
      const auto& params = replicas[r][t].params();
      w.data.reserve(params.size() * 3);
      const SpreadSlot slot{static_cast<int>(r), static_cast<int>(t), degrees};
      for (const model::Param& p : params) {
        for (const char* kind : kinds) {
          std::vector<float>& d = w.data.emplace_back(p.value.span().begin(), p.value.span().end());
          for (float& v : d) v = fake(kind, v);
          for (PieceView& v : spread_param_views(p, kind, d, slot, o)) {
            w.views.push_back(std::move(v));
          }
        }
      }
    }
  }
  const std::filesystem::path step = prepare_step_dir(dir.path(), 1).value();
  std::vector<ShardRecord> records;
  int strided = 0;
  for (size_t i = 0; i < writers.size(); ++i) {
    for (const PieceView& v : writers[i].views) strided += v.row_floats != 0 ? 1 : 0;
    // Half the writers through a snapshot (the trainer's path), half straight from the views.
    if (i % 2 == 0) {
      records.push_back(write_shard(step, writers[i].id, writers[i].views).value());
    } else {
      const Snapshot snap = Snapshot::copy_of(writers[i].views).value();
      records.push_back(write_shard(step, writers[i].id, snap.views()).value());
    }
  }
  EXPECT_GT(strided, 0);
  // Per element of every (tensor, kind): how many writers stored it.
  std::map<std::pair<std::string, std::string>, std::vector<int>> seen;
  std::map<std::string, int64_t> bytes_of;
  int64_t total = 0;
  for (const ShardRecord& rec : records) {
    for (const PieceRecord& p : rec.pieces) {
      std::vector<int>& count = seen[{p.spec.tensor, p.spec.kind}];
      count.resize(static_cast<size_t>(shape_numel(p.spec.logical_shape)));
      const int64_t n = local_numel(p.spec);
      bytes_of[rec.writer] += n * 4;
      total += n * 4;
      if (p.spec.whole()) {
        for (int& c : count) ++c;
        continue;
      }
      const auto a = static_cast<size_t>(p.spec.axis);
      int64_t inner = 1;
      for (size_t d = a + 1; d < p.spec.logical_shape.size(); ++d) {
        inner *= p.spec.logical_shape[d];
      }
      const auto k = static_cast<int64_t>(p.spec.index.size());
      for (int64_t e = 0; e < n; ++e) {
        const int64_t o2 = e / inner / k, i = (e / inner) % k;
        const int64_t logical =
            (o2 * p.spec.logical_shape[a] + p.spec.index[static_cast<size_t>(i)]) * inner +
            e % inner;
        ++count[static_cast<size_t>(logical)];
      }
    }
  }
  for (const auto& [key, count] : seen) {
    for (size_t e = 0; e < count.size(); ++e) {
      ASSERT_EQ(count[e], 1) << key.first << " (" << key.second << ") element " << e;
    }
  }
  EXPECT_EQ(seen.size(), replicas[0][0].params().size() * 3);
  EXPECT_EQ(total, config.num_params() * 3 * 4);
  for (const Writer& w : writers) EXPECT_GT(bytes_of[w.id], 0) << "writer " << w.id;
  CheckpointMeta meta;
  meta.step = 1;
  ASSERT_TRUE(commit_checkpoint(dir.path(), meta, records).ok());
  const CheckpointReader reader = CheckpointReader::open(dir.path()).value();
  ASSERT_TRUE(reader.verify_all().ok());
  for (const auto& [degree, seed] : std::vector<std::pair<int, uint64_t>>{{3, 9}, {1, 0}, {4, 0}}) {
    for (const model::GptModel& rank : make_ranks(config, degree, seed)) {
      for (const model::Param& p : rank.params()) {
        for (const char* kind : kinds) {
          std::vector<float> got(static_cast<size_t>(p.value.numel()), -1.0f);
          ASSERT_TRUE(reader.read(param_piece(p, kind), got).ok()) << p.name;
          std::vector<float> want(p.value.span().begin(), p.value.span().end());
          for (float& v : want) v = fake(kind, v);
          EXPECT_EQ(std::memcmp(got.data(), want.data(), got.size() * 4), 0)
              << p.name << " (" << kind << ") at degree " << degree;
        }
      }
    }
  }
}

}  // namespace
}  // namespace ntp::checkpoint
