// replica_windows: the replicas of an `ntp eval` job split the batches of one process.
#include <gtest/gtest.h>

#include "train/window_eval.h"

namespace ntp::train {
namespace {

// For every split of N windows in batches of B over R replicas: the shares are contiguous, in
// replica order, cover every window once, start on a batch boundary of the one-process run (so
// every batch holds the same windows), and differ by at most one batch; a replica past the last
// batch gets none, at the end.
TEST(ReplicaWindowsTest, SharesAreTheOneProcessBatchesInBalancedContiguousRuns) {
  for (int64_t n : {1, 4, 5, 62, 64}) {
    for (int64_t b : {1, 3, 4, 8}) {
      for (int r : {1, 2, 3, 5}) {
        WindowEvalOptions all{.context = 16, .batch = b, .windows = n, .offset = 5};
        int64_t next = 0, fewest = n, most = 0;
        for (int i = 0; i < r; ++i) {
          const WindowEvalOptions s = replica_windows(all, r, i);
          EXPECT_EQ(s.context, 16);
          EXPECT_EQ(s.batch, b);
          EXPECT_EQ(s.offset, 5 + next * 16) << n << " " << b << " " << r << " " << i;
          if (s.windows > 0) {
            EXPECT_EQ(next % b, 0) << "a share starts on a batch boundary";
          }
          const int64_t batches = (s.windows + b - 1) / b;
          fewest = std::min(fewest, batches);
          most = std::max(most, batches);
          next += s.windows;
        }
        EXPECT_EQ(next, n) << n << " " << b << " " << r;
        EXPECT_LE(most - fewest, 1) << n << " " << b << " " << r;
      }
    }
  }
}

}  // namespace
}  // namespace ntp::train
