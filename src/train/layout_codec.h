// The text form of a job's cluster layout that a re-formation's decider publishes with its member
// list (elastic/member_list.h: base_layout), so that a member that lacks the base epoch's layout (a
// joiner) plans from the same one as everyone else. A layout is its failed slots, the domains
// that left the job, its slots' speeds (a speed-weighted layout) and every replica's slot order:
// the units follow from the degrees and speeds (the sync strategy is deterministic), the slot order
// from the history of re-formations, which only the publication carries.
#pragma once

#include <string>

#include "core/status.h"
#include "shard/cluster_layout.h"
#include "shard/sync_plan.h"

namespace ntp::train {

std::string encode_layout(const shard::ClusterLayout& layout);

// The layout of `spec`'s cluster that `text` describes (`spec` gives the shape: domains, spaces,
// byte costs; its failed, left and speeds lists are replaced). kInternal for a text that does not
// fit the shape.
Result<shard::ClusterLayout> decode_layout(const std::string& text, shard::ClusterSpec spec,
                                           const shard::SyncStrategy& strategy);

}  // namespace ntp::train
