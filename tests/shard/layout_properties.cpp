#include "layout_properties.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>

#include "random_cluster.h"

namespace ntp::shard::testing {

void check_layout_properties(const ClusterLayout& layout, bool balanced) {
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
      if (balanced) {
        EXPECT_LE(hi - lo, 1) << "balance in " << spec.spaces[sp].name;
      }
      if (!spec.spaces[sp].derived()) {  // a derived space's owners follow its source's
        EXPECT_GE(lo, 1) << "every rank owns at least one unit of " << spec.spaces[sp].name;
      }
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

}  // namespace ntp::shard::testing
