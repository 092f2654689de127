// Random cluster memberships for the layout-algebra property tests.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/rng.h"
#include "shard/cluster_layout.h"

namespace ntp::shard::testing {

// A valid random ClusterSpec: domain size from 1..72 or 128, 1..12 domains, up to 8 distinct
// degrees among the replicas, unit counts that are often prime, never fewer units than the largest
// degree.
ClusterSpec random_cluster_spec(Rng& rng);

// The same spec with `count` more healthy slots failed (never taking a domain below min_tp or to
// zero); fewer when no slot can fail.
ClusterSpec fail_more(const ClusterSpec& spec, Rng& rng, int count);

// The same spec with up to `count` failed slots repaired.
ClusterSpec repair_some(const ClusterSpec& spec, Rng& rng, int count);

// Three domains of 72 slots whose second runs at `degree` (slots degree..71 failed), over the
// spaces of `shape`: every degree of an NVL72 domain next to healthy ones.
ClusterSpec three_nvl72_with_one_at(int degree, const ModelShape& shape);

// One instance of every SyncStrategy ntp has, configured for `spec`.
std::vector<std::unique_ptr<SyncStrategy>> all_strategies(const ClusterSpec& spec);

// A fingerprint of every field of a layout (slots, units, sync plan), for determinism checks.
std::uint64_t fingerprint(const ClusterLayout& layout);

// "domains=3 size=7 failed=[0:1 ...] spaces=[heads:7 ...]" for failure messages.
std::string describe(const ClusterSpec& spec);

}  // namespace ntp::shard::testing
