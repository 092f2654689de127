// PairMesh through connect_gloo, with ranks as threads of this process over a file store: groups
// over shared links give exact results, and the rendezvous leaves no address key behind (each
// key's one reader erases it once read).
#include "comm/pair_mesh.h"

#include <gtest/gtest.h>

#include <atomic>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "comm/communicator.h"
#include "comm/gloo_communicator.h"
#include "comm/store.h"
#include "multiprocess.h"

namespace ntp::comm {
namespace {

using testing::TempDir;

// Forwards to a store and counts the address batches published (set_many calls).
class BatchCountingStore final : public Store {
 public:
  explicit BatchCountingStore(std::shared_ptr<Store> inner) : inner_(std::move(inner)) {}
  Status set(const std::string& key, const std::string& value) override {
    return inner_->set(key, value);
  }
  Result<std::string> get(const std::string& key) override { return inner_->get(key); }
  Result<bool> exists(const std::string& key) override { return inner_->exists(key); }
  Result<bool> claim(const std::string& key, const std::string& value) override {
    return inner_->claim(key, value);
  }
  Result<std::int64_t> add(const std::string& key, std::int64_t delta) override {
    return inner_->add(key, delta);
  }
  Result<std::vector<std::optional<std::string>>> get_many(
      const std::vector<std::string>& keys) override {
    return inner_->get_many(keys);
  }
  Status set_many(const std::vector<std::pair<std::string, std::string>>& entries) override {
    ++batches;
    return inner_->set_many(entries);
  }
  Status erase(const std::vector<std::string>& keys) override { return inner_->erase(keys); }
  std::string describe() const override { return inner_->describe(); }
  std::atomic<int> batches{0};

 private:
  std::shared_ptr<Store> inner_;
};

// Runs `body(rank, world, store)` on `n` threads, each with its own store client and world;
// `plan(rank, options)` may change the world's options first.
template <typename Plan, typename Body>
void run_planned_ranks(const std::string& dir, int n, int full_mesh_max_size, Plan plan,
                       Body body) {
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      Result<std::shared_ptr<Store>> file = open_store("file:" + dir, "mesh");
      ASSERT_TRUE(file.ok());
      auto store = std::make_shared<BatchCountingStore>(*file);
      GlooOptions options =
          testing::rank_options(store, r, n, "w", std::chrono::seconds(20), full_mesh_max_size);
      plan(r, options);
      Result<std::unique_ptr<Communicator>> world = connect_gloo(options);
      ASSERT_TRUE(world.ok()) << world.status().to_string();
      body(r, **world, *store);
    });
  }
  for (std::thread& t : threads) t.join();
}

// Runs `body(rank, world)` on `n` threads, each with its own store client and world.
template <typename Body>
void run_ranks(const std::string& dir, int n, int full_mesh_max_size, Body body) {
  run_planned_ranks(
      dir, n, full_mesh_max_size, [](int, GlooOptions&) {},
      [&body](int r, Communicator& world, BatchCountingStore&) { body(r, world); });
}

void expect_no_address_keys(const std::string& dir, int n) {
  std::shared_ptr<Store> store = *open_store("file:" + dir, "mesh");
  for (int i = 0; i < n; ++i) {
    for (int j = 0; j < n; ++j) {
      EXPECT_FALSE(*store->exists("w/p/" + std::to_string(i) + "/" + std::to_string(j)))
          << "address key " << i << " -> " << j << " left behind";
    }
  }
}

TEST(PairMeshTest, ConcurrentGroupsOverOneMeshAreExactAndLeaveNoKeys) {
  TempDir dir;
  constexpr int kRanks = 4;
  run_ranks(dir.path(), kRanks, 32, [](int r, Communicator& world) {
    // Two subgroups over the world's pairs: TP and sync of one "replica" (the same ranks).
    std::vector<int> all{0, 1, 2, 3};
    Result<std::unique_ptr<Communicator>> tp = world.subgroup(all, "tp0");
    Result<std::unique_ptr<Communicator>> sync = world.subgroup(all, "sync0");
    ASSERT_TRUE(tp.ok() && sync.ok());
    std::vector<double> a{static_cast<double>(r)}, b{10.0 * r};
    WorkPtr pending = (*sync)->allreduce_async(view(b), ReduceOp::kSum);
    ASSERT_TRUE((*tp)->allreduce(view(a)).ok());
    ASSERT_TRUE(pending->wait().ok());
    EXPECT_EQ(a[0], 6.0);  // 0 + 1 + 2 + 3, exact
    EXPECT_EQ(b[0], 60.0);
    ASSERT_TRUE(world.barrier().ok());
  });
  expect_no_address_keys(dir.path(), kRanks);
}

TEST(PairMeshTest, SparseWorldConnectsOnDemandAndLeavesNoKeys) {
  TempDir dir;
  constexpr int kRanks = 6;
  run_ranks(dir.path(), kRanks, 2, [](int r, Communicator& world) {
    std::vector<double> x{1.0 + r};
    ASSERT_TRUE(world.allreduce(view(x)).ok());  // the tree
    EXPECT_EQ(x[0], 21.0);
    // alltoallv to every rank connects the pairs the tree and ring lack.
    std::vector<double> in(kRanks), out(kRanks);
    for (int q = 0; q < kRanks; ++q) in[static_cast<std::size_t>(q)] = 100.0 * r + q;
    const std::vector<std::size_t> ones(kRanks, 1);
    ASSERT_TRUE(world.alltoallv(const_view(in), ones, view(out), ones).ok());
    for (int q = 0; q < kRanks; ++q) EXPECT_EQ(out[static_cast<std::size_t>(q)], 100.0 * q + r);
  });
  expect_no_address_keys(dir.path(), kRanks);
}

// A job's formation in miniature: a world of 8 over which every rank forms its replica's TP
// group (4 ranks, dense) and its DP group (2 ranks). The world of 8 is sparse (groups above 4
// are), so the TP and DP groups need links the world's ring and tree lack: rank 5's world links
// are 4 and 6; its TP group adds 7 and its DP group adds 1.
constexpr int kFormationRanks = 8;
constexpr int kFormationDenseMax = 4;

std::vector<int> tp_ranks(int r) {
  const int first = r / 4 * 4;
  return {first, first + 1, first + 2, first + 3};
}
std::vector<int> dp_ranks(int r) { return {r % 4, r % 4 + 4}; }

// Every group's collective is exact over the links the formation connected.
void check_groups(int r, Communicator& world) {
  Result<std::unique_ptr<Communicator>> tp =
      world.subgroup(tp_ranks(r), "tp" + std::to_string(r / 4));
  Result<std::unique_ptr<Communicator>> dp =
      world.subgroup(dp_ranks(r), "dp" + std::to_string(r % 4));
  ASSERT_TRUE(tp.ok()) << tp.status().to_string();
  ASSERT_TRUE(dp.ok()) << dp.status().to_string();
  std::vector<double> a{1.0 + r}, b{1.0 + r};
  ASSERT_TRUE((*tp)->allreduce(view(a)).ok());
  ASSERT_TRUE((*dp)->allreduce(view(b)).ok());
  const int first = r / 4 * 4;
  EXPECT_EQ(a[0], 4.0 * first + 10.0);   // (first + 1) + ... + (first + 4), exact
  EXPECT_EQ(b[0], 2.0 * (r % 4) + 6.0);  // (r % 4 + 1) + (r % 4 + 5)
  ASSERT_TRUE(world.barrier().ok());
}

TEST(PairMeshTest, PlannedSubgroupsPublishTheWholeFormationInOneBatch) {
  TempDir dir;
  run_planned_ranks(
      dir.path(), kFormationRanks, kFormationDenseMax,
      [](int r, GlooOptions& options) {
        options.planned_subgroups = {tp_ranks(r), dp_ranks(r)};
      },
      [](int r, Communicator& world, BatchCountingStore& store) {
        check_groups(r, world);
        // One address batch for the world and both groups, whatever links each group adds.
        EXPECT_EQ(store.batches.load(), 1) << "rank " << r;
      });
  expect_no_address_keys(dir.path(), kFormationRanks);
}

TEST(PairMeshTest, UnplannedSubgroupsPublishABatchEachThatAddsLinks) {
  TempDir dir;
  run_planned_ranks(
      dir.path(), kFormationRanks, kFormationDenseMax, [](int, GlooOptions&) {},
      [](int r, Communicator& world, BatchCountingStore& store) {
        check_groups(r, world);
        if (r == 5) {
          EXPECT_EQ(store.batches.load(), 3);  // world {4, 6}, then TP {7}, then DP {1}
        }
      });
  expect_no_address_keys(dir.path(), kFormationRanks);
}

TEST(PairMeshTest, APlannedSubgroupWithoutThisRankIsRefusedByName) {
  TempDir dir;
  Result<std::shared_ptr<Store>> store = open_store("file:" + dir.path(), "mesh");
  ASSERT_TRUE(store.ok());
  GlooOptions options;
  options.store = *store;
  options.rank = 1;
  options.size = 4;
  options.prefix = "w";
  for (const std::vector<int>& bad :
       {std::vector<int>{0, 2}, std::vector<int>{1, 1, 2}, std::vector<int>{1, 4}}) {
    options.planned_subgroups = {bad};
    Result<std::unique_ptr<Communicator>> world = connect_gloo(options);
    ASSERT_EQ(world.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(world.status().message().find("planned subgroup"), std::string::npos)
        << world.status().message();
  }
}

}  // namespace
}  // namespace ntp::comm
