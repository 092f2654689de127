#include "shard/reshard_plan.h"

#include <algorithm>
#include <map>
#include <tuple>

namespace ntp::shard {
namespace {

// (destination, space, source): ordered, so the plan is deterministic.
using TransferKey = std::tuple<SlotRef, int, SlotRef>;

// A unit that no live slot of its destination's domain holds, and who else does: the owner in
// each DP peer domain that has a live one, by domain.
struct MissingUnit {
  SlotRef destination;
  int space = 0;
  std::int64_t unit = 0;
  std::int64_t bytes = 0;
  std::vector<SlotRef> holders;
};

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

// The smallest level that `loads` (sorted ascending) must be raised to so that the raised ones
// take `total` more in all, scaled by m, the number raised (exact in integers): returns
// {level * m, m}. Peer c then takes level * m - load_c * m (in 1/m bytes) when positive.
std::pair<std::int64_t, std::int64_t> water_level(const std::vector<std::int64_t>& loads,
                                                  std::int64_t total) {
  std::int64_t prefix = 0;
  const auto k = static_cast<std::int64_t>(loads.size());
  for (std::int64_t m = 1; m <= k; ++m) {
    prefix += loads[static_cast<std::size_t>(m - 1)];
    if (m == k || total + prefix <= m * loads[static_cast<std::size_t>(m)]) {
      return {total + prefix, m};
    }
  }
  return {total, 1};  // no peers (not reached: a missing unit has at least one holder)
}

// Splits `units` (all held by the same peer domains, in plan order) among those peers so that
// their total send bytes (`sent`, by domain, over the whole plan) end as level as whole units
// allow: the group is water-filled onto the peers' loads, its units laid end to end along the
// peers' quotas, and each unit goes to the peer whose quota holds the unit's midpoint. So a
// peer's share differs from its exact quota by at most one unit (half a unit at each of its two
// cuts), and every peer's units of one destination stay contiguous runs.
void split_among_peers(const std::vector<const MissingUnit*>& units,
                       std::vector<std::int64_t>& sent,
                       std::map<TransferKey, std::vector<std::int64_t>>& ids) {
  const std::vector<SlotRef>& holders = units.front()->holders;
  std::int64_t total = 0;
  for (const MissingUnit* u : units) total += u->bytes;
  std::vector<std::int64_t> loads;
  for (const SlotRef& h : holders) loads.push_back(sent[static_cast<std::size_t>(h.domain)]);
  std::sort(loads.begin(), loads.end());
  const auto [level, m] = water_level(loads, total);
  // Cumulative quota ends, in 1/m bytes, peers in domain order.
  std::vector<std::int64_t> ends;
  std::int64_t end = 0;
  for (const SlotRef& h : holders) {
    end += std::max<std::int64_t>(0, level - m * sent[static_cast<std::size_t>(h.domain)]);
    ends.push_back(end);
  }
  std::int64_t start = 0;  // in 1/m bytes
  std::size_t c = 0;
  for (const MissingUnit* u : units) {
    // Midpoint start + bytes / 2 before ends[c], doubled to stay in integers.
    while (c + 1 < ends.size() && 2 * start + m * u->bytes >= 2 * ends[c]) ++c;
    const SlotRef& source = u->holders[c];
    ids[{u->destination, u->space, source}].push_back(u->unit);
    sent[static_cast<std::size_t>(source.domain)] += u->bytes;
    start += m * u->bytes;
  }
}

// Every missing unit from the DP peers that hold it, balanced by bytes (split_among_peers).
// Units held by fewer peers are placed first, so that the peers holding more can even out the
// load. Deterministic: the order is the plan's and ties go by domain.
void pull_from_peers(const std::vector<MissingUnit>& missing, int domains,
                     std::map<TransferKey, std::vector<std::int64_t>>& ids) {
  std::map<std::pair<std::size_t, std::vector<int>>, std::vector<const MissingUnit*>> groups;
  for (const MissingUnit& u : missing) {
    std::vector<int> by{};
    for (const SlotRef& h : u.holders) by.push_back(h.domain);
    groups[{by.size(), by}].push_back(&u);
  }
  std::vector<std::int64_t> sent(static_cast<std::size_t>(domains), 0);
  for (const auto& [key, units] : groups) split_among_peers(units, sent, ids);
}

}  // namespace

Result<ReshardPlan> plan_reshard(const ClusterLayout& from, const ClusterLayout& to) {
  if (from.spec.domains != to.spec.domains || from.spec.domain_size != to.spec.domain_size ||
      from.spec.spaces.size() != to.spec.spaces.size()) {
    return invalid_argument("reshard needs two layouts of the same cluster and model shape");
  }
  ReshardPlan plan;
  const int domains = to.spec.domains;
  std::map<TransferKey, IntervalSet> moves;              // within domains
  std::map<TransferKey, std::vector<std::int64_t>> ids;  // from DP peers: unit ids
  std::vector<MissingUnit> missing;
  for (std::size_t sp = 0; sp < to.spec.spaces.size(); ++sp) {
    const UnitSpace& space = to.spec.spaces[sp];
    const std::int64_t unit_bytes = space.params_per_unit * to.spec.bytes.state_bytes;
    const auto owners = live_owner_maps(from, static_cast<int>(sp), to.spec);
    for (int d = 0; d < domains; ++d) {
      const ReplicaLayout& replica = to.replicas[static_cast<std::size_t>(d)];
      for (int r = 0; r < replica.degree(); ++r) {
        const SlotRef dst{d, replica.slots[static_cast<std::size_t>(r)]};
        const IntervalSet& wanted = replica.units[sp][static_cast<std::size_t>(r)];
        // Local sources first: the slot itself (kept) or another live slot of the domain.
        IntervalSet local;
        for_each_owned_piece(
            owners[static_cast<std::size_t>(d)], wanted, [&](const Interval& piece, int src) {
              local.append(piece.begin, piece.end);
              if (src == dst.slot) {
                plan.kept_bytes += piece.size() * unit_bytes;
              } else {
                moves[{dst, static_cast<int>(sp), SlotRef{d, src}}].append(piece.begin, piece.end);
              }
            });
        // What no live local slot holds comes from the DP peers that have it.
        const IntervalSet lost = subtract(wanted, local);
        std::map<std::int64_t, std::vector<SlotRef>> holders;
        for (int peer = 0; peer < domains; ++peer) {
          if (peer == d) continue;
          for_each_owned_piece(owners[static_cast<std::size_t>(peer)], lost,
                               [&](const Interval& piece, int src) {
                                 for (std::int64_t u = piece.begin; u < piece.end; ++u) {
                                   holders[u].push_back({peer, src});
                                 }
                               });
        }
        IntervalSet found;
        for (auto& [u, who] : holders) {
          found.append(u, u + 1);
          missing.push_back({dst, static_cast<int>(sp), u, unit_bytes, std::move(who)});
        }
        const IntervalSet nowhere = subtract(lost, found);
        if (!nowhere.empty()) {
          return not_found(space.name + " units " + nowhere.to_string() + " of domain " +
                           std::to_string(d) +
                           " have no live copy in any domain; restore them from a checkpoint");
        }
      }
    }
  }
  pull_from_peers(missing, domains, ids);
  for (auto& [key, units] : ids) moves[key] = IntervalSet::from_ids(std::move(units));
  std::vector<std::int64_t> into_slot(static_cast<std::size_t>(domains * to.spec.domain_size), 0);
  for (auto& [key, units] : moves) {
    const auto [dst, space_index, src] = key;
    ShardTransfer t{space_index, src, dst, std::move(units), 0};
    t.bytes = t.units.count() *
              to.spec.spaces[static_cast<std::size_t>(space_index)].params_per_unit *
              to.spec.bytes.state_bytes;
    (t.intra_domain() ? plan.intra_domain_bytes : plan.dp_peer_bytes) += t.bytes;
    into_slot[static_cast<std::size_t>(dst.domain * to.spec.domain_size + dst.slot)] += t.bytes;
    plan.transfers.push_back(std::move(t));
  }
  // The map's order is already (destination, space, source).
  plan.max_bytes_into_slot =
      into_slot.empty() ? 0 : *std::max_element(into_slot.begin(), into_slot.end());
  return plan;
}

}  // namespace ntp::shard
