// The properties every cluster layout must have, checked with gtest assertions.
#pragma once

#include "shard/cluster_layout.h"

namespace ntp::shard::testing {

// Every property DESIGN.md 2.1 and the plan's consumers rely on, for one layout: each unit owned
// once per replica, every rank on its own healthy slot with at least one unit of every space, DP
// groups partitioning every space with one member per replica, and after the fold every rank
// holding exactly the units of its groups. `balanced`: also rank counts within one unit of each
// other (not so for speed-weighted layouts).
void check_layout_properties(const ClusterLayout& layout, bool balanced = true);

}  // namespace ntp::shard::testing
