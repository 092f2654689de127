#include "shard/cluster_layout.h"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <map>
#include <memory>
#include <set>

#include "random_cluster.h"
#include "shard/fold_sync_strategy.h"
#include "shard/native_sync_strategy.h"

namespace ntp::shard {
namespace {

using testing::describe;
using testing::random_cluster_spec;

constexpr int kRandomCases = 400;

// Every property docs/design/architecture.md 2.1 and the plan's consumers rely on, for one layout.
void check_layout_properties(const ClusterLayout& layout) {
  const ClusterSpec& spec = layout.spec;
  SCOPED_TRACE(describe(spec));
  ASSERT_EQ(layout.replicas.size(), static_cast<std::size_t>(spec.domains));
  if (layout.sync.strategy == "fold") {
    int min_degree = spec.domain_size;
    for (const ReplicaLayout& r : layout.replicas) min_degree = std::min(min_degree, r.degree());
    EXPECT_EQ(layout.sync.sync_degree, min_degree);
  }

  for (const ReplicaLayout& replica : layout.replicas) {
    // Ranks run on distinct healthy slots, one per healthy slot.
    std::vector<int> slots = replica.slots;
    std::sort(slots.begin(), slots.end());
    EXPECT_EQ(slots, spec.healthy_slots(replica.domain));
    for (std::size_t sp = 0; sp < spec.spaces.size(); ++sp) {
      const std::int64_t units = spec.spaces[sp].units;
      std::vector<int> owners(static_cast<std::size_t>(units), 0);
      std::int64_t lo = units, hi = 0;
      for (const IntervalSet& s : replica.units[sp]) {
        for (const Interval& i : s.intervals()) {
          ASSERT_GE(i.begin, 0);
          ASSERT_LE(i.end, units);
          for (std::int64_t u = i.begin; u < i.end; ++u) ++owners[static_cast<std::size_t>(u)];
        }
        lo = std::min(lo, s.count());
        hi = std::max(hi, s.count());
      }
      for (std::int64_t u = 0; u < units; ++u) {
        ASSERT_EQ(owners[static_cast<std::size_t>(u)], 1)
            << "unit " << u << " of " << spec.spaces[sp].name << " in domain " << replica.domain;
      }
      EXPECT_LE(hi - lo, 1) << "balance in " << spec.spaces[sp].name;
    }
  }

  // DP groups partition every space and have one member per replica, in domain order. After the
  // fold, every rank holds exactly the units of the groups it is a member of: folds only send units
  // their source owns, and no unit arrives twice.
  for (std::size_t sp = 0; sp < spec.spaces.size(); ++sp) {
    const std::int64_t units = spec.spaces[sp].units;
    std::vector<int> group_cover(static_cast<std::size_t>(units), 0);
    std::map<std::pair<int, int>, IntervalSet> represents;  // (domain, rank) -> units reduced
    for (const DpGroup& g : layout.sync.groups) {
      if (g.space != static_cast<int>(sp)) continue;
      for (std::int64_t u : g.units.ids()) ++group_cover[static_cast<std::size_t>(u)];
      ASSERT_EQ(g.members.size(), static_cast<std::size_t>(spec.domains));
      for (int d = 0; d < spec.domains; ++d) {
        const RankRef member = g.members[static_cast<std::size_t>(d)];
        ASSERT_EQ(member.domain, d);
        ASSERT_GE(member.rank, 0);
        ASSERT_LT(member.rank, layout.replicas[static_cast<std::size_t>(d)].degree());
        auto& mine = represents[{d, member.rank}];
        ASSERT_EQ(intersection_count(mine, g.units), 0);
        mine = unite(mine, g.units);
      }
    }
    for (std::int64_t u = 0; u < units; ++u) {
      ASSERT_EQ(group_cover[static_cast<std::size_t>(u)], 1) << "unit " << u << " in DP groups";
    }
    for (const ReplicaLayout& replica : layout.replicas) {
      std::vector<IntervalSet> held = replica.units[sp];
      for (const FoldTransfer& f : layout.sync.folds) {
        if (f.space != static_cast<int>(sp) || f.domain != replica.domain) continue;
        IntervalSet& from = held[static_cast<std::size_t>(f.from_rank)];
        IntervalSet& to = held[static_cast<std::size_t>(f.to_rank)];
        ASSERT_EQ(intersect(replica.units[sp][static_cast<std::size_t>(f.from_rank)], f.units),
                  f.units)
            << "a fold sends units its source does not own";
        ASSERT_EQ(intersection_count(to, f.units), 0) << "a unit folded twice";
        from = subtract(from, f.units);
        to = unite(to, f.units);
      }
      for (int k = 0; k < replica.degree(); ++k) {
        auto it = represents.find({replica.domain, k});
        const IntervalSet want = it == represents.end() ? IntervalSet() : it->second;
        EXPECT_EQ(held[static_cast<std::size_t>(k)], want)
            << "domain " << replica.domain << " rank " << k << " after the fold";
      }
    }
  }
}

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
    ClusterSpec spec;
    spec.domains = 3;
    spec.domain_size = 72;
    spec.spaces = model_unit_spaces({.heads = 128, .hidden = 128, .ffn = 1021, .vocab = 257});
    for (int l = degree; l < 72; ++l) spec.failed.push_back({1, l});
    auto layout = plan_cluster(spec, strategy);
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
