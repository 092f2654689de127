#include "sim/snapshot.h"

#include <gtest/gtest.h>

#include <cmath>

#include "sim/workload.h"
#include "sim_test_util.h"

namespace ntp::sim {
namespace {

TEST(Snapshot, NoFailuresNoLoss) {
  const SimConfig c = testing::small_config();
  const SnapshotResult r = snapshot(c, 0.0);
  for (double l : r.loss) EXPECT_DOUBLE_EQ(l, 0.0);
}

// DP-DROP with k failed GPUs placed uniformly among N loses a replica of g GPUs with probability
// 1 - C(N - g, k) / C(N, k): the hypergeometric reference, computed independently here.
TEST(Snapshot, DpDropMatchesTheHypergeometricReference) {
  const SimConfig c = testing::small_config(2, {"sim.trials=4000"});
  const double fraction = 6.0 / 64;
  const SnapshotResult r = snapshot(c, fraction);
  ASSERT_EQ(r.failed_gpus, 6);
  double p_untouched = 1.0;  // C(56, 6) / C(64, 6) for an 8-GPU replica
  for (int i = 0; i < 6; ++i) p_untouched *= (56.0 - i) / (64.0 - i);
  EXPECT_NEAR(r.loss[0], 1 - p_untouched, 4 * r.loss_ci[0] / 1.96 + 1e-3);
}

}  // namespace
}  // namespace ntp::sim
