// Coverage: the pieces of a checkpoint must hold every element of every (tensor, kind) exactly
// once.
//
// For one (tensor, kind), a whole piece counts 1 for every element and a piece on axis a counts 1
// for the elements whose coordinate along a is in its index. Because each count depends on one
// coordinate only, "every element exactly once" holds iff the pieces' per-axis slice counts are
// constant and sum to 1: one whole piece, or pieces on one axis whose indices partition it
// (pieces with an empty index hold nothing and are ignored).
#pragma once

#include <vector>

#include "checkpoint/records.h"
#include "core/status.h"

namespace ntp::checkpoint {

// kInvalidArgument naming the tensor, kind and the first slice covered 0 or 2+ times, or the
// pieces whose logical shapes disagree (also across kinds of one tensor).
Status check_coverage(const std::vector<PieceRecord>& pieces);

}  // namespace ntp::checkpoint
