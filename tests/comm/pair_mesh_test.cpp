// PairMesh through connect_gloo, with ranks as threads of this process over a file store: groups
// over shared links give exact results, and the rendezvous leaves no address key behind (each
// key's one reader erases it once read).
#include "comm/pair_mesh.h"

#include <gtest/gtest.h>

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

// Runs `body(rank, world)` on `n` threads, each with its own store client and world.
template <typename Body>
void run_ranks(const std::string& dir, int n, int full_mesh_max_size, Body body) {
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      Result<std::shared_ptr<Store>> store = open_store("file:" + dir, "mesh");
      ASSERT_TRUE(store.ok());
      GlooOptions options;
      options.store = *store;
      options.rank = r;
      options.size = n;
      options.prefix = "w";
      options.timeout = std::chrono::milliseconds(20000);
      options.full_mesh_max_size = full_mesh_max_size;
      Result<std::unique_ptr<Communicator>> world = connect_gloo(options);
      ASSERT_TRUE(world.ok()) << world.status().to_string();
      body(r, **world);
    });
  }
  for (std::thread& t : threads) t.join();
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

}  // namespace
}  // namespace ntp::comm
