#include "shard/cluster_layout.h"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <map>
#include <memory>
#include <set>

#include "layout_properties.h"
#include "random_cluster.h"
#include "shard/fold_sync_strategy.h"
#include "shard/native_sync_strategy.h"

namespace ntp::shard {
namespace {

using testing::check_layout_properties;
using testing::describe;
using testing::random_cluster_spec;

constexpr int kRandomCases = 400;

TEST(ClusterLayout, RandomClustersSatisfyLayoutPropertiesUnderEveryStrategy) {
  Rng rng(2026);
  for (int trial = 0; trial < kRandomCases; ++trial) {
    const ClusterSpec spec = random_cluster_spec(rng);
    for (const auto& strategy : testing::all_strategies(spec)) {
      SCOPED_TRACE(std::string(strategy->name()));
      auto layout = plan_cluster(spec, *strategy);
      ASSERT_TRUE(layout.ok()) << layout.status().to_string();
      check_layout_properties(*layout);
    }
  }
}

TEST(ClusterLayout, NativeStrategyKeepsHealthyReplicasUntouchedByFailures) {
  Rng rng(31);
  for (int trial = 0; trial < 100; ++trial) {
    const ClusterSpec spec = random_cluster_spec(rng);
    const NativeSyncStrategy strategy(spec.domain_size);
    auto before = plan_cluster(spec, strategy);
    auto after = plan_cluster(testing::fail_more(spec, rng, 2), strategy, &*before);
    ASSERT_TRUE(before.ok() && after.ok());
    for (int d = 0; d < spec.domains; ++d) {
      if (after->spec.degree(d) != spec.degree(d)) continue;
      EXPECT_EQ(after->replicas[static_cast<std::size_t>(d)].units,
                before->replicas[static_cast<std::size_t>(d)].units);
      EXPECT_EQ(after->replicas[static_cast<std::size_t>(d)].slots,
                before->replicas[static_cast<std::size_t>(d)].slots);
    }
  }
}

TEST(ClusterLayout, EveryDegreeOfA72SlotDomainNextToAHealthyOne) {
  const FoldSyncStrategy strategy;
  for (int degree = 1; degree <= 72; ++degree) {
    auto layout =
        plan_cluster(testing::three_nvl72_with_one_at(
                         degree, {.heads = 128, .hidden = 128, .ffn = 1021, .vocab = 257}),
                     strategy);
    ASSERT_TRUE(layout.ok()) << layout.status().to_string();
    check_layout_properties(*layout);
  }
}

TEST(ClusterLayout, CostsMatchTheSyncPlan) {
  Rng rng(77);
  const FoldSyncStrategy strategy;
  for (int trial = 0; trial < 100; ++trial) {
    auto layout = plan_cluster(random_cluster_spec(rng), strategy);
    ASSERT_TRUE(layout.ok());
    const ClusterSpec& spec = layout->spec;
    auto unit_bytes = [&](int sp) {
      return spec.spaces[static_cast<std::size_t>(sp)].params_per_unit * spec.bytes.grad_bytes;
    };
    std::vector<std::vector<RankSyncCost>> want(static_cast<std::size_t>(spec.domains));
    for (int d = 0; d < spec.domains; ++d)
      want[static_cast<std::size_t>(d)].resize(static_cast<std::size_t>(spec.degree(d)));
    for (const FoldTransfer& f : layout->sync.folds) {
      const std::int64_t b = f.units.count() * unit_bytes(f.space);
      want[static_cast<std::size_t>(f.domain)][static_cast<std::size_t>(f.from_rank)]
          .fold_out_bytes += b;
      want[static_cast<std::size_t>(f.domain)][static_cast<std::size_t>(f.to_rank)].fold_in_bytes +=
          b;
    }
    for (const DpGroup& g : layout->sync.groups) {
      for (const RankRef& m : g.members) {
        want[static_cast<std::size_t>(m.domain)][static_cast<std::size_t>(m.rank)].dp_bytes +=
            g.units.count() * unit_bytes(g.space);
      }
    }
    for (int d = 0; d < spec.domains; ++d) {
      for (int r = 0; r < spec.degree(d); ++r) {
        const RankSyncCost& got =
            layout->sync.costs[static_cast<std::size_t>(d)][static_cast<std::size_t>(r)];
        const RankSyncCost& w = want[static_cast<std::size_t>(d)][static_cast<std::size_t>(r)];
        EXPECT_EQ(got.fold_out_bytes, w.fold_out_bytes);
        EXPECT_EQ(got.fold_in_bytes, w.fold_in_bytes);
        EXPECT_EQ(got.dp_bytes, w.dp_bytes);
      }
    }
  }
}

// `spec` without its left domains, the others renumbered 0..n-1.
ClusterSpec without_left(const ClusterSpec& spec, std::vector<int>& present) {
  ClusterSpec out = spec;
  out.left.clear();
  out.failed.clear();
  out.speeds.clear();
  present.clear();
  for (int d = 0; d < spec.domains; ++d) {
    if (spec.has_left(d)) continue;
    for (const SlotRef& f : spec.failed) {
      if (f.domain == d) out.failed.push_back({static_cast<int>(present.size()), f.slot});
    }
    present.push_back(d);
  }
  out.domains = static_cast<int>(present.size());
  return out;
}

// A domain that left the job (below --min-tp) has no ranks, units or sync costs; the others are
// laid out and synchronized exactly as a cluster without it, their own domain numbers kept.
TEST(ClusterLayout, ADomainThatLeftIsLaidOutAsIfTheClusterHadNone) {
  Rng rng(4242);
  int cases = 0;
  for (int trial = 0; trial < 200; ++trial) {
    ClusterSpec spec = random_cluster_spec(rng);
    if (spec.domains < 2) continue;
    const int leaving =
        1 + static_cast<int>(rng.below(static_cast<std::uint64_t>(spec.domains - 1)));
    std::vector<int> order(static_cast<std::size_t>(spec.domains));
    for (int d = 0; d < spec.domains; ++d) order[static_cast<std::size_t>(d)] = d;
    for (int i = 0; i < leaving; ++i) {
      std::swap(order[static_cast<std::size_t>(i)],
                order[static_cast<std::size_t>(i) +
                      rng.below(static_cast<std::uint64_t>(spec.domains - i))]);
      spec.left.push_back(order[static_cast<std::size_t>(i)]);
    }
    std::sort(spec.left.begin(), spec.left.end());  // as validation leaves it
    std::vector<int> present;
    const ClusterSpec compact = without_left(spec, present);
    for (const auto& strategy : testing::all_strategies(compact)) {
      SCOPED_TRACE(std::string(strategy->name()) + " " + describe(spec));
      auto layout = plan_cluster(spec, *strategy);
      auto reference = plan_cluster(compact, *strategy);
      ASSERT_TRUE(layout.ok()) << layout.status().to_string();
      ASSERT_TRUE(reference.ok()) << reference.status().to_string();
      for (int d = 0; d < spec.domains; ++d) {
        const ReplicaLayout& r = layout->replicas[static_cast<std::size_t>(d)];
        EXPECT_EQ(r.domain, d);
        if (!spec.has_left(d)) continue;
        EXPECT_EQ(r.degree(), 0);
        for (const auto& per_rank : r.units) EXPECT_TRUE(per_rank.empty());
        EXPECT_TRUE(layout->sync.costs[static_cast<std::size_t>(d)].empty());
      }
      for (std::size_t k = 0; k < present.size(); ++k) {
        const ReplicaLayout& got = layout->replicas[static_cast<std::size_t>(present[k])];
        EXPECT_EQ(got.slots, reference->replicas[k].slots);
        EXPECT_EQ(got.units, reference->replicas[k].units);
      }
      ASSERT_EQ(layout->sync.folds.size(), reference->sync.folds.size());
      for (std::size_t i = 0; i < layout->sync.folds.size(); ++i) {
        const FoldTransfer& f = layout->sync.folds[i];
        EXPECT_EQ(f.domain, present[static_cast<std::size_t>(reference->sync.folds[i].domain)]);
        EXPECT_EQ(f.units, reference->sync.folds[i].units);
      }
      ASSERT_EQ(layout->sync.groups.size(), reference->sync.groups.size());
      for (std::size_t i = 0; i < layout->sync.groups.size(); ++i) {
        const DpGroup& g = layout->sync.groups[i];
        ASSERT_EQ(g.members.size(), present.size());
        for (std::size_t m = 0; m < g.members.size(); ++m) {
          EXPECT_EQ(g.members[m].domain,
                    present[static_cast<std::size_t>(reference->sync.groups[i].members[m].domain)]);
          EXPECT_EQ(g.members[m].rank, reference->sync.groups[i].members[m].rank);
        }
      }
      ++cases;
    }
  }
  EXPECT_GT(cases, 100);  // the random specs gave enough multi-domain cases to mean something
}

TEST(ClusterLayout, EveryDomainLeavingIsAnError) {
  ClusterSpec spec;
  spec.domains = 2;
  spec.domain_size = 4;
  spec.spaces = model_unit_spaces({.heads = 8, .hidden = 32, .ffn = 64, .vocab = 0});
  spec.left = {0, 1};
  EXPECT_FALSE(plan_cluster(spec, FoldSyncStrategy()).ok());
  spec.left = {2};
  EXPECT_FALSE(plan_cluster(spec, FoldSyncStrategy()).ok());
  spec.left = {1, 1};
  EXPECT_FALSE(plan_cluster(spec, FoldSyncStrategy()).ok());
}

TEST(ClusterLayout, UniformClusterNeedsNoFolds) {
  ClusterSpec spec;
  spec.domains = 4;
  spec.domain_size = 8;
  spec.spaces = model_unit_spaces({.heads = 32, .hidden = 64, .ffn = 256, .vocab = 0});
  auto layout = plan_cluster(spec, FoldSyncStrategy());
  ASSERT_TRUE(layout.ok());
  EXPECT_TRUE(layout->sync.folds.empty());
  EXPECT_EQ(layout->sync.sync_degree, 8);
  EXPECT_EQ(layout->replicas[2].units[0][3].to_string(), "12-15");  // contiguous Megatron layout
}

// Plans are a pure function of the inputs: separate processes computing the same plan agree.
TEST(ClusterLayout, PlansAreIdenticalAcrossProcesses) {
  Rng rng(99);
  std::vector<ClusterSpec> specs;
  std::uint64_t expected = 0;
  for (int i = 0; i < 20; ++i) {
    specs.push_back(random_cluster_spec(rng));
    auto layout = plan_cluster(specs.back(), FoldSyncStrategy());
    ASSERT_TRUE(layout.ok());
    expected = splitmix64(expected ^ testing::fingerprint(*layout));
  }
  constexpr int kProcesses = 3;
  for (int p = 0; p < kProcesses; ++p) {
    int fds[2];
    ASSERT_EQ(pipe(fds), 0);
    const pid_t pid = fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      close(fds[0]);
      std::uint64_t h = 0;
      // Reverse order so the child's heap history differs from the parent's.
      std::vector<std::uint64_t> prints(specs.size());
      for (std::size_t i = specs.size(); i-- > 0;) {
        prints[i] = testing::fingerprint(plan_cluster(specs[i], FoldSyncStrategy()).value());
      }
      for (std::uint64_t f : prints) h = splitmix64(h ^ f);
      const bool written = write(fds[1], &h, sizeof(h)) == static_cast<ssize_t>(sizeof(h));
      _exit(written ? 0 : 1);
    }
    close(fds[1]);
    std::uint64_t got = 0;
    ASSERT_EQ(read(fds[0], &got, sizeof(got)), static_cast<ssize_t>(sizeof(got)));
    close(fds[0]);
    int status = 0;
    ASSERT_EQ(waitpid(pid, &status, 0), pid);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    EXPECT_EQ(got, expected) << "process " << p;
  }
}

}  // namespace
}  // namespace ntp::shard
