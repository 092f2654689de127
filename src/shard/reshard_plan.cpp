#include "shard/reshard_plan.h"

#include <algorithm>
#include <map>
#include <tuple>

namespace ntp::shard {
namespace {

using TransferKey =
    std::tuple<int, int, int, int>;  // (destination slot, space, source domain, slot)

// Owner maps of every domain of a layout, for one space, keeping only slots alive in `alive_spec`
// (a domain that left it holds nothing).
std::vector<std::vector<OwnedRange>> live_owner_maps(const ClusterLayout& layout, int space,
                                                     const ClusterSpec& alive_spec) {
  std::vector<std::vector<OwnedRange>> maps;
  maps.reserve(layout.replicas.size());
  for (const ReplicaLayout& replica : layout.replicas) {
    std::vector<OwnedRange> owners = replica.owner_map(space);
    std::erase_if(owners, [&](const OwnedRange& o) {
      return alive_spec.is_failed({replica.domain, o.slot}) || alive_spec.has_left(replica.domain);
    });
    maps.push_back(std::move(owners));
  }
  return maps;
}

}  // namespace

Result<ReshardPlan> plan_reshard(const ClusterLayout& from, const ClusterLayout& to) {
  if (from.spec.domains != to.spec.domains || from.spec.domain_size != to.spec.domain_size ||
      from.spec.spaces.size() != to.spec.spaces.size()) {
    return invalid_argument("reshard needs two layouts of the same cluster and model shape");
  }
  ReshardPlan plan;
  const int domains = to.spec.domains;
  std::vector<std::int64_t> into_slot(static_cast<std::size_t>(domains * to.spec.domain_size), 0);
  for (std::size_t sp = 0; sp < to.spec.spaces.size(); ++sp) {
    const UnitSpace& space = to.spec.spaces[sp];
    const std::int64_t unit_bytes = space.params_per_unit * to.spec.bytes.state_bytes;
    const auto owners = live_owner_maps(from, static_cast<int>(sp), to.spec);
    for (int d = 0; d < domains; ++d) {
      const ReplicaLayout& replica = to.replicas[static_cast<std::size_t>(d)];
      std::map<TransferKey, IntervalSet> moves;  // ordered, so the plan is deterministic
      for (int r = 0; r < replica.degree(); ++r) {
        const int dst = replica.slots[static_cast<std::size_t>(r)];
        const IntervalSet& wanted = replica.units[sp][static_cast<std::size_t>(r)];
        // Local sources first: the slot itself (kept) or another live slot of the domain.
        IntervalSet local;
        for_each_owned_piece(
            owners[static_cast<std::size_t>(d)], wanted, [&](const Interval& piece, int src) {
              local.append(piece.begin, piece.end);
              if (src == dst) {
                plan.kept_bytes += piece.size() * unit_bytes;
              } else {
                moves[{dst, static_cast<int>(sp), d, src}].append(piece.begin, piece.end);
              }
            });
        // What no live local slot holds comes from the nearest DP peer that has it.
        IntervalSet missing = subtract(wanted, local);
        for (int step = 1; step < domains && !missing.empty(); ++step) {
          const int peer = (d + step) % domains;
          IntervalSet found;
          for_each_owned_piece(
              owners[static_cast<std::size_t>(peer)], missing, [&](const Interval& piece, int src) {
                found.append(piece.begin, piece.end);
                moves[{dst, static_cast<int>(sp), peer, src}].append(piece.begin, piece.end);
              });
          missing = subtract(missing, found);
        }
        if (!missing.empty()) {
          return not_found(space.name + " units " + missing.to_string() + " of domain " +
                           std::to_string(d) +
                           " have no live copy in any domain; restore them from a checkpoint");
        }
      }
      for (auto& [key, units] : moves) {
        const auto [dst, space_index, src_domain, src_slot] = key;
        ShardTransfer t{space_index, {src_domain, src_slot}, {d, dst}, std::move(units), 0};
        t.bytes = t.units.count() * unit_bytes;
        (t.intra_domain() ? plan.intra_domain_bytes : plan.dp_peer_bytes) += t.bytes;
        into_slot[static_cast<std::size_t>(d * to.spec.domain_size + dst)] += t.bytes;
        plan.transfers.push_back(std::move(t));
      }
    }
  }
  std::stable_sort(plan.transfers.begin(), plan.transfers.end(),
                   [](const ShardTransfer& a, const ShardTransfer& b) {
                     return std::tie(a.destination, a.space, a.source) <
                            std::tie(b.destination, b.space, b.source);
                   });
  plan.max_bytes_into_slot =
      into_slot.empty() ? 0 : *std::max_element(into_slot.begin(), into_slot.end());
  return plan;
}

}  // namespace ntp::shard
