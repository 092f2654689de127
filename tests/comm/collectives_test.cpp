// Exact multi-process tests of the Gloo Communicator: real processes, file store, every
// collective at world sizes 1, 2, 3, 5, 7 and 8 with element counts 0, 1, primes and uneven
// per-rank counts, on both sides of the small-message threshold (direct and ring/chain paths),
// dense and sparse (tree and ring paths, comm/gloo_tree.h).
// Inputs are small integers, so every sum is exact in float32 and float64 and results are compared
// with ==, against references computed here independently.
#include <gtest/gtest.h>

#include <cstdint>
#include <numeric>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "comm/gloo_communicator.h"
#include "comm/store.h"
#include "multiprocess.h"

namespace ntp::comm {
namespace {

using testing::spawn_ranks;
using testing::TempDir;
using testing::wait_all;

constexpr std::size_t kCounts[] = {0, 1, 2, 13, 101, 1009, 65537};

// Value that rank r contributes at index i: a small integer (|v| < 2^10), sums stay exact.
double contribution(int r, std::size_t i) {
  return static_cast<double>(static_cast<int>((i * 7 + static_cast<std::size_t>(r) * 13) % 97) -
                             48 + r);
}

// full_mesh_max_size below n makes the group sparse: ring and tree links only, tree algorithms
// for small messages (comm/gloo_tree.h); the default keeps every group of these sizes dense.
Result<std::unique_ptr<Communicator>> connect(const std::string& dir, int rank, int n,
                                              int full_mesh_max_size) {
  NTP_ASSIGN_OR_RETURN(std::shared_ptr<Store> store, open_store("file:" + dir, "collectives"));
  return connect_gloo(
      testing::rank_options(store, rank, n, "world", std::chrono::seconds(20), full_mesh_max_size));
}

template <typename T>
int check_allreduce(Communicator& comm, int r, int n) {
  for (std::size_t count : kCounts) {
    for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAvg}) {
      std::vector<T> data(count);
      for (std::size_t i = 0; i < count; ++i) data[i] = static_cast<T>(contribution(r, i));
      Status s = comm.allreduce(view(data), op);
      CHILD_CHECK(s.ok(), r, "allreduce: " + s.to_string());
      for (std::size_t i = 0; i < count; ++i) {
        double sum = 0;
        for (int q = 0; q < n; ++q) sum += contribution(q, i);
        const T want = op == ReduceOp::kSum
                           ? static_cast<T>(sum)
                           : static_cast<T>(static_cast<T>(sum) / static_cast<T>(n));
        CHILD_CHECK(data[i] == want, r,
                    "allreduce count " + std::to_string(count) + " index " + std::to_string(i));
      }
    }
  }
  return 0;
}

// Uneven per-rank counts with zeros: rank q's share is (base + 5q) mod 7 elements.
std::vector<std::size_t> uneven_counts(int n, std::size_t base) {
  std::vector<std::size_t> counts(static_cast<std::size_t>(n));
  for (int q = 0; q < n; ++q)
    counts[static_cast<std::size_t>(q)] = (base + 5 * static_cast<std::size_t>(q)) % 7;
  return counts;
}

template <typename T>
int check_reduce_scatter(Communicator& comm, int r, int n) {
  for (std::size_t base : {0, 1, 3, 6}) {
    std::vector<std::size_t> counts = uneven_counts(n, base);
    if (base == 6) counts[0] = 1009;  // one large, prime share
    const std::size_t total = std::accumulate(counts.begin(), counts.end(), std::size_t{0});
    std::size_t offset = 0;
    for (int q = 0; q < r; ++q) offset += counts[static_cast<std::size_t>(q)];
    std::vector<T> input(total);
    for (std::size_t i = 0; i < total; ++i) input[i] = static_cast<T>(contribution(r, i));
    std::vector<T> output(counts[static_cast<std::size_t>(r)], static_cast<T>(-1));
    Status s = comm.reduce_scatter(const_view(input), view(output), counts, ReduceOp::kSum);
    CHILD_CHECK(s.ok(), r, "reduce_scatter: " + s.to_string());
    for (std::size_t i = 0; i < output.size(); ++i) {
      double sum = 0;
      for (int q = 0; q < n; ++q) sum += contribution(q, offset + i);
      CHILD_CHECK(output[i] == static_cast<T>(sum), r,
                  "reduce_scatter base " + std::to_string(base) + " index " + std::to_string(i));
    }
  }
  return 0;
}

int check_allgather(Communicator& comm, int r, int n) {
  for (std::size_t base : {0, 2, 4}) {
    std::vector<std::size_t> counts = uneven_counts(n, base);
    const std::size_t total = std::accumulate(counts.begin(), counts.end(), std::size_t{0});
    std::vector<std::int64_t> mine(counts[static_cast<std::size_t>(r)]);
    for (std::size_t i = 0; i < mine.size(); ++i) mine[i] = r * 1000 + static_cast<int>(i);
    std::vector<std::int64_t> all(total, -1);
    Status s = comm.allgather(const_view(mine), view(all), counts);
    CHILD_CHECK(s.ok(), r, "allgather: " + s.to_string());
    std::size_t k = 0;
    for (int q = 0; q < n; ++q) {
      for (std::size_t i = 0; i < counts[static_cast<std::size_t>(q)]; ++i, ++k) {
        CHILD_CHECK(all[k] == q * 1000 + static_cast<int>(i), r,
                    "allgather element " + std::to_string(k));
      }
    }
  }
  return 0;
}

int check_alltoallv(Communicator& comm, int r, int n) {
  // Rank s sends (s + 2d) mod 5 elements to rank d; element i of that piece is s*10000+d*100+i.
  auto amount = [](int s, int d) { return static_cast<std::size_t>((s + 2 * d) % 5); };
  std::vector<std::size_t> send_counts(static_cast<std::size_t>(n));
  std::vector<std::size_t> recv_counts(static_cast<std::size_t>(n));
  std::vector<float> input;
  for (int d = 0; d < n; ++d) {
    send_counts[static_cast<std::size_t>(d)] = amount(r, d);
    recv_counts[static_cast<std::size_t>(d)] = amount(d, r);
    for (std::size_t i = 0; i < amount(r, d); ++i) {
      input.push_back(static_cast<float>(r * 10000 + d * 100 + static_cast<int>(i)));
    }
  }
  std::vector<float> output(std::accumulate(recv_counts.begin(), recv_counts.end(), std::size_t{0}),
                            -1.0F);
  Status s = comm.alltoallv(const_view(input), send_counts, view(output), recv_counts);
  CHILD_CHECK(s.ok(), r, "alltoallv: " + s.to_string());
  std::size_t k = 0;
  for (int src = 0; src < n; ++src) {
    for (std::size_t i = 0; i < amount(src, r); ++i, ++k) {
      CHILD_CHECK(output[k] == static_cast<float>(src * 10000 + r * 100 + static_cast<int>(i)), r,
                  "alltoallv element " + std::to_string(k));
    }
  }
  return 0;
}

// `count` doubles broadcast from `root`: every rank ends with the root's contribution.
int check_broadcast(Communicator& comm, int r, int root, std::size_t count,
                    const std::string& what) {
  std::vector<double> data(count);
  for (std::size_t i = 0; i < data.size(); ++i) data[i] = r == root ? contribution(root, i) : -7.0;
  Status s = comm.broadcast(view(data), root);
  CHILD_CHECK(s.ok(), r, what + ": " + s.to_string());
  for (std::size_t i = 0; i < data.size(); ++i) {
    CHILD_CHECK(data[i] == contribution(root, i), r, what + " element " + std::to_string(i));
  }
  return 0;
}

int check_broadcast_and_p2p(Communicator& comm, int r, int n) {
  for (int root : {0, n - 1}) {
    if (check_broadcast(comm, r, root, 1009, "broadcast") != 0) return 1;
  }
  if (n > 1) {
    // A ring shift: rank 0 sends first, every other rank receives first, so nobody waits on a
    // send whose receiver is itself blocked in a send.
    std::vector<std::int32_t> out(101), in(101, -1);
    for (std::size_t i = 0; i < out.size(); ++i) out[i] = r * 1000 + static_cast<int>(i);
    const int next = (r + 1) % n;
    const int prev = (r + n - 1) % n;
    if (r == 0) {
      CHILD_CHECK(comm.send(const_view(out), next, 5).ok(), r, "send");
      CHILD_CHECK(comm.recv(view(in), prev, 5).ok(), r, "recv");
    } else {
      CHILD_CHECK(comm.recv(view(in), prev, 5).ok(), r, "recv");
      CHILD_CHECK(comm.send(const_view(out), next, 5).ok(), r, "send");
    }
    for (std::size_t i = 0; i < in.size(); ++i) {
      CHILD_CHECK(in[i] == prev * 1000 + static_cast<int>(i), r,
                  "recv element " + std::to_string(i));
    }
  }
  CHILD_CHECK(comm.barrier().ok(), r, "barrier");
  return 0;
}

// Sizes past the small-message paths: ring allgather with uneven counts and zeros, the
// pipelined broadcast chain, allreduce with several segments per chunk, large alltoallv pieces.
int check_large(Communicator& comm, int r, int n) {
  {
    std::vector<std::size_t> counts(static_cast<std::size_t>(n));
    for (int q = 0; q < n; ++q) {
      counts[static_cast<std::size_t>(q)] =
          q % 3 == 1 ? 0 : 40009 + 17 * static_cast<std::size_t>(q);
    }
    const std::size_t total = std::accumulate(counts.begin(), counts.end(), std::size_t{0});
    std::vector<float> mine(counts[static_cast<std::size_t>(r)]);
    for (std::size_t i = 0; i < mine.size(); ++i)
      mine[i] = static_cast<float>(r * 100000 + static_cast<int>(i));
    std::vector<float> all(total, -1.0F);
    Status s = comm.allgather(const_view(mine), view(all), counts);
    CHILD_CHECK(s.ok(), r, "large allgather: " + s.to_string());
    std::size_t k = 0;
    for (int q = 0; q < n; ++q) {
      for (std::size_t i = 0; i < counts[static_cast<std::size_t>(q)]; ++i, ++k) {
        CHILD_CHECK(all[k] == static_cast<float>(q * 100000 + static_cast<int>(i)), r,
                    "large allgather element " + std::to_string(k));
      }
    }
  }
  for (int root : {0, n - 1, n / 2}) {
    if (check_broadcast(comm, r, root, 300007, "large broadcast") != 0) return 1;
  }
  {
    // 5.6 MB: with 2 ranks each chunk spans several 1 MiB segments.
    std::vector<double> data(700001);
    for (std::size_t i = 0; i < data.size(); ++i) data[i] = contribution(r, i);
    Status s = comm.allreduce(view(data), ReduceOp::kSum);
    CHILD_CHECK(s.ok(), r, "large allreduce: " + s.to_string());
    for (std::size_t i = 0; i < data.size(); ++i) {
      double sum = 0;
      for (int q = 0; q < n; ++q) sum += contribution(q, i);
      CHILD_CHECK(data[i] == sum, r, "large allreduce index " + std::to_string(i));
    }
  }
  {
    // Rank s sends 20000 + 7 * (s + d) elements to rank d, none to rank (s + 1) % n.
    auto amount = [n](int s, int d) {
      return n > 1 && d == (s + 1) % n ? std::size_t{0}
                                       : static_cast<std::size_t>(20000 + 7 * (s + d));
    };
    std::vector<std::size_t> send_counts(static_cast<std::size_t>(n));
    std::vector<std::size_t> recv_counts(static_cast<std::size_t>(n));
    std::vector<std::int32_t> input;
    for (int d = 0; d < n; ++d) {
      send_counts[static_cast<std::size_t>(d)] = amount(r, d);
      recv_counts[static_cast<std::size_t>(d)] = amount(d, r);
      for (std::size_t i = 0; i < amount(r, d); ++i)
        input.push_back(r * 1000000 + d * 100000 + static_cast<int>(i));
    }
    std::vector<std::int32_t> output(
        std::accumulate(recv_counts.begin(), recv_counts.end(), std::size_t{0}), -1);
    Status s = comm.alltoallv(const_view(input), send_counts, view(output), recv_counts);
    CHILD_CHECK(s.ok(), r, "large alltoallv: " + s.to_string());
    std::size_t k = 0;
    for (int src = 0; src < n; ++src) {
      for (std::size_t i = 0; i < amount(src, r); ++i, ++k) {
        CHILD_CHECK(output[k] == src * 1000000 + r * 100000 + static_cast<int>(i), r,
                    "large alltoallv element " + std::to_string(k));
      }
    }
  }
  return 0;
}

// Every root, a piece of 0, 3 and 20011 elements (the large one past the scratch the tree first
// holds), the root's own piece given in place or apart; non-roots pass no output. Exact.
int check_gather(Communicator& comm, int r, int n) {
  for (int root = 0; root < n; ++root) {
    for (std::size_t count : {std::size_t{0}, std::size_t{3}, std::size_t{20011}}) {
      std::vector<std::int64_t> mine(count);
      for (std::size_t i = 0; i < count; ++i) mine[i] = r * 1000000 + static_cast<int>(i);
      std::vector<std::int64_t> all(r == root ? count * static_cast<std::size_t>(n) : 0, -1);
      const bool in_place = root % 2 == 1 && r == root;
      if (in_place) std::copy(mine.begin(), mine.end(), all.begin() + static_cast<long>(r * count));
      const ConstView input =
          in_place ? ConstView{all.data() + r * count, count, DType::kInt64} : const_view(mine);
      Status s = comm.gather(input, view(all), root);
      CHILD_CHECK(s.ok(), r, "gather at " + std::to_string(root) + ": " + s.to_string());
      for (std::size_t k = 0; k < all.size(); ++k) {
        const auto q = static_cast<std::int64_t>(k / count);
        CHILD_CHECK(all[k] == q * 1000000 + static_cast<std::int64_t>(k % count), r,
                    "gather at " + std::to_string(root) + " element " + std::to_string(k));
      }
    }
  }
  // Every rank the root of its own call, with no room: refused before anything is sent.
  std::vector<float> one(1), none;
  CHILD_CHECK(comm.gather(const_view(one), view(none), r).code() == StatusCode::kInvalidArgument, r,
              "a root's output of the wrong size is refused");
  return 0;
}

int check_async(Communicator& comm, int r, int n) {
  // Three operations in flight at once; they run in submission order and each result is exact.
  std::vector<float> a(4099), b(13);
  std::vector<double> c(1009);
  for (std::size_t i = 0; i < a.size(); ++i) a[i] = static_cast<float>(contribution(r, i));
  for (std::size_t i = 0; i < b.size(); ++i) b[i] = static_cast<float>(contribution(r, i + 1));
  for (std::size_t i = 0; i < c.size(); ++i) c[i] = contribution(r, i + 2);
  WorkPtr wa = comm.allreduce_async(view(a), ReduceOp::kSum);
  WorkPtr wb = comm.allreduce_async(view(b), ReduceOp::kSum);
  WorkPtr wc = comm.allreduce_async(view(c), ReduceOp::kSum);
  CHILD_CHECK(wc->wait().ok() && wb->wait().ok() && wa->wait().ok(), r, "async waits");
  CHILD_CHECK(wa->done() && wb->done() && wc->done(), r, "done() after wait");
  for (std::size_t i = 0; i < a.size(); ++i) {
    double sum = 0;
    for (int q = 0; q < n; ++q) sum += contribution(q, i);
    CHILD_CHECK(a[i] == static_cast<float>(sum), r, "async a");
  }
  for (std::size_t i = 0; i < b.size(); ++i) {
    double sum = 0;
    for (int q = 0; q < n; ++q) sum += contribution(q, i + 1);
    CHILD_CHECK(b[i] == static_cast<float>(sum), r, "async b");
  }
  for (std::size_t i = 0; i < c.size(); ++i) {
    double sum = 0;
    for (int q = 0; q < n; ++q) sum += contribution(q, i + 2);
    CHILD_CHECK(c[i] == sum, r, "async c");
  }
  return 0;
}

int check_subgroup(Communicator& comm, int r, int n) {
  // Even ranks and odd ranks form two concurrent subgroups.
  std::vector<int> members;
  for (int q = r % 2; q < n; q += 2) members.push_back(q);
  Result<std::unique_ptr<Communicator>> sub = comm.subgroup(members, r % 2 == 0 ? "even" : "odd");
  CHILD_CHECK(sub.ok(), r, "subgroup: " + sub.status().to_string());
  CHILD_CHECK((*sub)->size() == static_cast<int>(members.size()) && (*sub)->rank() == r / 2, r,
              "subgroup rank/size");
  std::vector<double> data(101);
  for (std::size_t i = 0; i < data.size(); ++i) data[i] = contribution(r, i);
  CHILD_CHECK((*sub)->allreduce(view(data)).ok(), r, "subgroup allreduce");
  for (std::size_t i = 0; i < data.size(); ++i) {
    double sum = 0;
    for (int q : members) sum += contribution(q, i);
    CHILD_CHECK(data[i] == sum, r, "subgroup sum");
  }
  // A gather at the subgroup's last rank: pieces in subgroup rank order.
  const int root = static_cast<int>(members.size()) - 1;
  const std::vector<double> mine{static_cast<double>(r), contribution(r, 0)};
  std::vector<double> all((*sub)->rank() == root ? 2 * members.size() : 0);
  CHILD_CHECK((*sub)->gather(const_view(mine), view(all), root).ok(), r, "subgroup gather");
  for (std::size_t k = 0; k < all.size(); k += 2) {
    CHILD_CHECK(all[k] == members[k / 2] && all[k + 1] == contribution(members[k / 2], 0), r,
                "subgroup gather piece " + std::to_string(k / 2));
  }
  return 0;
}

int run_all(const std::string& dir, int r, int n, int full_mesh_max_size) {
  Result<std::unique_ptr<Communicator>> comm = connect(dir, r, n, full_mesh_max_size);
  CHILD_CHECK(comm.ok(), r, "connect: " + comm.status().to_string());
  Communicator& c = **comm;
  CHILD_CHECK(c.rank() == r && c.size() == n, r, "rank/size");
  if (check_allreduce<float>(c, r, n) != 0) return 1;
  if (check_allreduce<double>(c, r, n) != 0) return 1;
  if (check_reduce_scatter<float>(c, r, n) != 0) return 1;
  if (check_reduce_scatter<double>(c, r, n) != 0) return 1;
  if (check_allgather(c, r, n) != 0) return 1;
  if (check_alltoallv(c, r, n) != 0) return 1;
  if (check_broadcast_and_p2p(c, r, n) != 0) return 1;
  if (check_large(c, r, n) != 0) return 1;
  if (check_gather(c, r, n) != 0) return 1;
  if (check_async(c, r, n) != 0) return 1;
  if (check_subgroup(c, r, n) != 0) return 1;
  CHILD_CHECK(c.health().ok(), r, "healthy at the end");
  return 0;
}

struct Shape {
  int size;
  int full_mesh_max_size;
};

class CollectivesTest : public ::testing::TestWithParam<Shape> {};

TEST_P(CollectivesTest, EveryCollectiveIsExact) {
  const int n = GetParam().size;
  const int full_mesh_max_size = GetParam().full_mesh_max_size;
  TempDir dir;
  std::vector<pid_t> pids =
      spawn_ranks(n, [&](int r) { return run_all(dir.path(), r, n, full_mesh_max_size); });
  std::vector<testing::ChildExit> exits = wait_all(pids, std::chrono::seconds(60));
  for (int r = 0; r < n; ++r) {
    const auto& e = exits[static_cast<std::size_t>(r)];
    EXPECT_FALSE(e.timed_out) << "rank " << r << " hung";
    EXPECT_TRUE(e.exited && e.code == 0)
        << "rank " << r << " code " << e.code << " signal " << e.signal;
  }
}

INSTANTIATE_TEST_SUITE_P(WorldSizes, CollectivesTest,
                         ::testing::Values(Shape{1, 32}, Shape{2, 32}, Shape{3, 32}, Shape{5, 32},
                                           Shape{7, 32}, Shape{8, 32}));
// Sparse groups: the world and its even/odd subgroups above 2 members. Tree sums add in another
// order than the direct path, and the inputs keep every order exact, so == still holds.
INSTANTIATE_TEST_SUITE_P(SparseWorldSizes, CollectivesTest,
                         ::testing::Values(Shape{3, 2}, Shape{5, 2}, Shape{7, 2}, Shape{8, 2},
                                           Shape{13, 2}));

}  // namespace
}  // namespace ntp::comm
