// Unit lists: what TpShard and LlamaShard layouts (model/tp_shard.h, model/llama_shard.h) are
// built and checked with. A unit space of `count` units is split over the ranks of a replica as
// one list of unit ids per rank. A shard type names its spaces once (UnitSpace), and the layouts
// of every shard type are built and checked by the one set of routines below.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/check.h"
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

// One unit space of a shard type: its name in messages, its unit count under a configuration, and
// the shard's list of it.
template <typename Shard>
struct UnitSpace {
  const char* name;
  int64_t count;
  std::vector<int64_t> Shard::*units;
};
template <typename Shard>
using UnitSpaces = std::vector<UnitSpace<Shard>>;

// The shard holding every unit of every space (degree 1).
template <typename Shard>
Shard full_shard_of(const UnitSpaces<Shard>& spaces) {
  Shard shard{};
  for (const UnitSpace<Shard>& space : spaces) shard.*space.units = all_units(space.count);
  return shard;
}

// `degree` shards, each space's units in `order(space)` dealt in balanced contiguous blocks
// (deal_units); the spaces are ordered in turn, first to last.
template <typename Shard, typename Order>
std::vector<Shard> deal_spaces(const UnitSpaces<Shard>& spaces, int degree, Order&& order) {
  NTP_CHECK(degree >= 1);
  std::vector<Shard> layout(static_cast<size_t>(degree));
  for (const UnitSpace<Shard>& space : spaces) {
    std::vector<std::vector<int64_t>> dealt = deal_units(order(space), degree);
    for (size_t r = 0; r < layout.size(); ++r) layout[r].*space.units = std::move(dealt[r]);
  }
  return layout;
}

// Balanced contiguous blocks per space (Megatron's layout when the degree divides the counts).
template <typename Shard>
std::vector<Shard> contiguous_layout_of(const UnitSpaces<Shard>& spaces, int degree) {
  return deal_spaces(spaces, degree, [](const UnitSpace<Shard>& s) { return all_units(s.count); });
}

// Balanced per space, each space shuffled before dealing, in order, by one Rng(seed).
template <typename Shard>
std::vector<Shard> shuffled_layout_of(const UnitSpaces<Shard>& spaces, int degree, uint64_t seed) {
  Rng rng(seed);
  return deal_spaces(spaces, degree,
                     [&rng](const UnitSpace<Shard>& s) { return shuffled_units(s.count, rng); });
}

// kInvalidArgument unless the shard's ids are in range and distinct in every space.
template <typename Shard>
Status validate_shard_of(const UnitSpaces<Shard>& spaces, const Shard& shard) {
  for (const UnitSpace<Shard>& space : spaces) {
    NTP_RETURN_IF_ERROR(check_unit_space(space.name, space.count, {&(shard.*space.units)}, false));
  }
  return ok_status();
}

// kInvalidArgument unless every unit of every space appears in exactly one shard.
template <typename Shard>
Status validate_layout_of(const UnitSpaces<Shard>& spaces, const std::vector<Shard>& layout) {
  if (layout.empty()) return invalid_argument("a TP layout needs at least one rank");
  for (const UnitSpace<Shard>& space : spaces) {
    std::vector<const std::vector<int64_t>*> lists;
    for (const Shard& shard : layout) lists.push_back(&(shard.*space.units));
    NTP_RETURN_IF_ERROR(check_unit_space(space.name, space.count, lists, true));
  }
  return ok_status();
}

// The layouts of a configuration whose shard type names its spaces: `unit_spaces(config)`, found
// by argument-dependent lookup (model/tp_shard.h for GptConfig, model/llama_shard.h for
// LlamaConfig), lists them in order; shuffled_layout draws the spaces' shuffles from one generator
// in that order.
template <typename Config>
concept HasUnitSpaces = requires(const Config& config) {
  unit_spaces(config);
};

// Every unit of every space (degree 1).
template <HasUnitSpaces Config>
auto full_shard(const Config& config) {
  return full_shard_of(unit_spaces(config));
}

// `degree` ranks, each space split into balanced contiguous blocks (Megatron's uniform layout
// when the degree divides the unit count).
template <HasUnitSpaces Config>
auto contiguous_layout(const Config& config, int degree) {
  return contiguous_layout_of(unit_spaces(config), degree);
}

// `degree` ranks, balanced (per space, unit counts differ by at most one), units of each space
// shuffled by `seed` before dealing: non-contiguous and unordered, the awkward case on purpose.
template <HasUnitSpaces Config>
auto shuffled_layout(const Config& config, int degree, uint64_t seed) {
  return shuffled_layout_of(unit_spaces(config), degree, seed);
}

// kInvalidArgument unless the shard's ids are in range and distinct.
template <HasUnitSpaces Config, typename Shard>
Status validate_shard(const Config& config, const Shard& shard) {
  return validate_shard_of<Shard>(unit_spaces(config), shard);
}

// kInvalidArgument unless every unit of every space appears in exactly one shard.
template <HasUnitSpaces Config, typename Shard>
Status validate_layout(const Config& config, const std::vector<Shard>& layout) {
  return validate_layout_of<Shard>(unit_spaces(config), layout);
}

}  // namespace ntp::model
