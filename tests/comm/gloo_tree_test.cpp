// The binomial tree and the links a sparse group connects (comm/gloo_tree.h), checked for every
// size up to 300 and several roots against their definition: one tree spanning all ranks, depth
// and fan-out at most ceil(log2 n), and links that both ends name.
#include "comm/gloo_tree.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <vector>

namespace ntp::comm::gloo_ops {
namespace {

int ceil_log2(int n) {
  int bits = 0;
  while ((1 << bits) < n) ++bits;
  return bits;
}

TEST(GlooTreeTest, EveryRankHangsOnceUnderTheRootWithinLog2Levels) {
  for (int n = 1; n <= 300; ++n) {
    for (int root : {0, 1, n / 2, n - 1}) {
      if (root >= n) continue;
      std::vector<int> claimed(static_cast<std::size_t>(n), 0);  // times named as a child
      for (int r = 0; r < n; ++r) {
        const TreeLinks links = binomial_tree(r, n, root);
        EXPECT_EQ(links.parent < 0, r == root) << "n " << n << " root " << root << " rank " << r;
        EXPECT_LE(static_cast<int>(links.children.size()), ceil_log2(n));
        for (int c : links.children) {
          ++claimed[static_cast<std::size_t>(c)];
          EXPECT_EQ(binomial_tree(c, n, root).parent, r) << "n " << n << " child " << c;
        }
        int depth = 0;
        for (int at = r; at != root; at = binomial_tree(at, n, root).parent) {
          ASSERT_LE(++depth, ceil_log2(n)) << "n " << n << " rank " << r << " too deep";
        }
      }
      for (int r = 0; r < n; ++r) {
        EXPECT_EQ(claimed[static_cast<std::size_t>(r)], r == root ? 0 : 1)
            << "n " << n << " root " << root << " rank " << r;
      }
    }
  }
}

TEST(GlooTreeTest, SparseLinksAreSymmetricAndFew) {
  for (int n = 1; n <= 300; ++n) {
    std::size_t total = 0;
    for (int r = 0; r < n; ++r) {
      const std::vector<int> peers = sparse_peers(r, n);
      total += peers.size();
      // Ring (2) + parent (1) + children (at most ceil(log2 n)).
      EXPECT_LE(static_cast<int>(peers.size()), 3 + ceil_log2(n));
      for (int q : peers) {
        EXPECT_NE(q, r);
        const std::vector<int> back = sparse_peers(q, n);
        EXPECT_TRUE(std::find(back.begin(), back.end(), r) != back.end())
            << "n " << n << ": " << r << " names " << q << " but not back";
      }
    }
    // A tree has n-1 links and the ring n: at most 4 link ends per rank on average.
    EXPECT_LE(total, static_cast<std::size_t>(4 * n)) << "n " << n;
  }
}

}  // namespace
}  // namespace ntp::comm::gloo_ops
