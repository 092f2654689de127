// Unit lists: what TpShard and LlamaShard layouts (model/tp_shard.h, model/llama_shard.h) are
// built and checked with. A unit space of `count` units is split over the ranks of a replica as
// one list of unit ids per rank.
#pragma once

#include <cstdint>
#include <vector>

#include "core/rng.h"
#include "core/status.h"

namespace ntp::model {

// 0, 1, ..., n - 1.
std::vector<int64_t> all_units(int64_t n);
// all_units(n) in the order of a Fisher-Yates shuffle drawn from rng.
std::vector<int64_t> shuffled_units(int64_t n, Rng& rng);
// Rank r of `degree` gets units [n r / degree, n (r + 1) / degree) of `order` (n = its size):
// balanced contiguous blocks whose sizes differ by at most one.
std::vector<std::vector<int64_t>> deal_units(const std::vector<int64_t>& order, int degree);
// kInvalidArgument, naming the space and the unit, when an id of `lists` is outside [0, count)
// or appears twice, or (require_all) when a unit of the space is in no list.
Status check_unit_space(const char* space, int64_t count,
                        const std::vector<const std::vector<int64_t>*>& lists, bool require_all);

}  // namespace ntp::model
