// The text form of a job's cluster layout that a re-formation's decider publishes with its member
// list (elastic/member_list.h: base_layout), so that a member that lacks the base epoch's layout (a
// joiner) plans from the same one as everyone else. A layout is its failed slots, the domains
// that left the job, its slots' speeds (a speed-weighted layout), its measured unit loads (experts
// placed by load) and every replica's slot order: the units follow from the degrees, speeds and
// loads (the sync strategy is deterministic), the slot order from the history of re-formations,
// which only the publication carries.
//
// The decider also publishes the unit loads it measured (an expert's routed tokens, as its
// replica saw them): every member, holder or joiner, plans the next layout from these, so that
// all place the experts alike although each replica measured its own.
#pragma once

#include <string>

#include "core/status.h"
#include "shard/cluster_layout.h"
#include "shard/sync_plan.h"

namespace ntp::train {

// `measured_loads`: ClusterSpec::unit_loads' shape (empty: none measured).
std::string encode_layout(const shard::ClusterLayout& layout,
                          const std::vector<std::vector<double>>& measured_loads = {});

// The layout of `spec`'s cluster that `text` describes (`spec` gives the shape: domains, spaces,
// byte costs; its failed, left and speeds lists are replaced). kInternal for a text that does not
// fit the shape.
Result<shard::ClusterLayout> decode_layout(const std::string& text, shard::ClusterSpec spec,
                                           const shard::SyncStrategy& strategy);

// The unit loads the decider measured, published with `text` (empty: none, or no text).
// kInternal for a text that is not a layout.
Result<std::vector<std::vector<double>>> published_unit_loads(const std::string& text);

}  // namespace ntp::train
