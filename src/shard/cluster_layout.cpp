#include "shard/cluster_layout.h"

#include <algorithm>
#include <tuple>

#include "shard/load_layout.h"
#include "shard/weighted_layout.h"

namespace ntp::shard {
namespace {

// Maps the ranks of a new replica layout onto the domain's healthy slots, preferring for each rank
// the slot that already holds most of its bytes.
std::vector<int> assign_slots(const RankUnits& units, const std::vector<int>& healthy,
                              const ReplicaLayout* previous, const ClusterSpec& spec) {
  const int degree = static_cast<int>(healthy.size());
  if (previous == nullptr) return healthy;
  if (previous->units == units && previous->slots.size() == healthy.size() &&
      std::is_permutation(previous->slots.begin(), previous->slots.end(), healthy.begin())) {
    return previous->slots;  // nothing changed in this replica
  }

  // kept[rank][slot]: bytes rank would keep if it ran on slot.
  const std::size_t domain_size = static_cast<std::size_t>(spec.domain_size);
  std::vector<std::int64_t> kept(static_cast<std::size_t>(degree) * domain_size, 0);
  for (std::size_t sp = 0; sp < units.size(); ++sp) {
    const std::int64_t unit_bytes = spec.spaces[sp].params_per_unit * spec.bytes.state_bytes;
    const std::vector<OwnedRange> owners = previous->owner_map(static_cast<int>(sp));
    for (int r = 0; r < degree; ++r) {
      for_each_owned_piece(
          owners, units[sp][static_cast<std::size_t>(r)], [&](const Interval& piece, int slot) {
            kept[static_cast<std::size_t>(r) * domain_size + static_cast<std::size_t>(slot)] +=
                piece.size() * unit_bytes;
          });
    }
  }
  std::vector<bool> usable(domain_size, false);
  for (int l : healthy) usable[static_cast<std::size_t>(l)] = true;
  std::vector<std::tuple<std::int64_t, int, int>> candidates;  // (-bytes, rank, slot)
  for (int r = 0; r < degree; ++r) {
    for (std::size_t l = 0; l < domain_size; ++l) {
      const std::int64_t b = kept[static_cast<std::size_t>(r) * domain_size + l];
      if (b > 0 && usable[l]) candidates.emplace_back(-b, r, static_cast<int>(l));
    }
  }
  std::sort(candidates.begin(), candidates.end());
  std::vector<int> slots(static_cast<std::size_t>(degree), -1);
  std::vector<bool> taken(domain_size, false);
  for (const auto& [neg_bytes, r, l] : candidates) {
    if (slots[static_cast<std::size_t>(r)] >= 0 || taken[static_cast<std::size_t>(l)]) continue;
    slots[static_cast<std::size_t>(r)] = l;
    taken[static_cast<std::size_t>(l)] = true;
  }
  auto next_free = healthy.begin();
  for (int& l : slots) {
    if (l >= 0) continue;
    while (taken[static_cast<std::size_t>(*next_free)]) ++next_free;
    l = *next_free;
    taken[static_cast<std::size_t>(l)] = true;
  }
  return slots;
}

bool same_slot_set(const std::vector<int>& slots, const std::vector<int>& healthy) {
  return slots.size() == healthy.size() &&
         std::is_permutation(slots.begin(), slots.end(), healthy.begin());
}

// The strategies plan replicas of degree >= 1 only: they see the domains still in the job
// (`present`, ascending) as domains 0..n-1, and expand_plan names them by their own domain again,
// giving every domain that left no ranks, no units and no sync cost.
StrategyPlan expand_plan(StrategyPlan compact, const std::vector<int>& present, int domains,
                         std::size_t spaces) {
  auto domain_of = [&present](int d) { return present[static_cast<std::size_t>(d)]; };
  StrategyPlan out;
  out.units.assign(static_cast<std::size_t>(domains), RankUnits(spaces));
  std::vector<std::vector<RankSyncCost>> costs = std::move(compact.sync.costs);
  out.sync = std::move(compact.sync);
  out.sync.costs.assign(static_cast<std::size_t>(domains), {});
  for (std::size_t k = 0; k < present.size(); ++k) {
    const auto d = static_cast<std::size_t>(present[k]);
    out.units[d] = std::move(compact.units[k]);
    out.sync.costs[d] = std::move(costs[k]);
  }
  for (FoldTransfer& f : out.sync.folds) f.domain = domain_of(f.domain);
  for (DpGroup& g : out.sync.groups) {
    for (RankRef& m : g.members) m.domain = domain_of(m.domain);
  }
  return out;
}

// Re-deals by load every space of `spec` with measured unit loads, over ranks running at
// rank_speeds[r] (shard/load_layout.h), and derives the derived spaces again. True when it
// dealt any.
bool deal_loaded_spaces(RankUnits& units, const std::vector<double>& rank_speeds,
                        const ClusterSpec& spec) {
  bool dealt = false;
  for (std::size_t sp = 0; sp < spec.spaces.size(); ++sp) {
    if (!spec.has_loads(static_cast<int>(sp))) continue;
    units[sp] = deal_by_load(spec.unit_loads[sp], rank_speeds);
    dealt = true;
  }
  if (dealt) derive_units(units, spec.spaces);
  return dealt;
}

}  // namespace

Result<ClusterLayout> plan_cluster(ClusterSpec spec, const SyncStrategy& strategy,
                                   const ClusterLayout* previous) {
  NTP_RETURN_IF_ERROR(validate_cluster_spec(spec));
  if (previous != nullptr &&
      (previous->spec.domains != spec.domains || previous->spec.domain_size != spec.domain_size ||
       previous->spec.spaces.size() != spec.spaces.size())) {
    return invalid_argument("the previous layout has a different cluster or model shape");
  }
  std::vector<int> present, degrees;  // the domains still in the job, and their degrees
  for (int d = 0; d < spec.domains; ++d) {
    if (spec.has_left(d)) continue;
    present.push_back(d);
    degrees.push_back(spec.degree(d));
  }
  StrategyPlan plan = expand_plan(strategy.plan(degrees, spec.spaces, spec.bytes), present,
                                  spec.domains, spec.spaces.size());

  ClusterLayout layout;
  layout.replicas.reserve(static_cast<std::size_t>(spec.domains));
  bool any_weighted = false;
  for (int d = 0; d < spec.domains; ++d) {
    ReplicaLayout replica;
    replica.domain = d;
    replica.units = std::move(plan.units[static_cast<std::size_t>(d)]);
    const ReplicaLayout* before =
        previous ? &previous->replicas[static_cast<std::size_t>(d)] : nullptr;
    const std::vector<int> healthy = spec.healthy_slots(d);
    const bool weighted = spec.weighted(d);
    // A replica below its full degree or at weighted speeds places its loaded spaces (a MoE's
    // experts) by their measured load; a healthy one keeps the balanced layout. At equal speeds
    // the deal comes first, so that the slots are assigned to keep most bytes in place.
    const bool reduced = !healthy.empty() && static_cast<int>(healthy.size()) < spec.domain_size;
    if (reduced && !weighted &&
        deal_loaded_spaces(replica.units, std::vector<double>(healthy.size(), 1.0), spec)) {
      any_weighted = true;
    }
    // A rebalance with the same members keeps every rank on its slot: the weighted layout is then
    // the balanced one minus exactly the units that change owner (and back again), where a greedy
    // remapping could trade a slowed rank's few kept units for the many it released.
    if (before != nullptr && (weighted || previous->spec.weighted(d)) &&
        same_slot_set(before->slots, healthy)) {
      replica.slots = before->slots;
    } else {
      replica.slots = assign_slots(replica.units, healthy, before, spec);
    }
    if (weighted) {
      std::vector<double> rank_speeds;
      rank_speeds.reserve(replica.slots.size());
      for (int l : replica.slots) rank_speeds.push_back(spec.speed(d, l));
      NTP_ASSIGN_OR_RETURN(replica.units, weighted_units(replica.units, rank_speeds, spec.spaces));
      derive_units(replica.units, spec.spaces);
      deal_loaded_spaces(replica.units, rank_speeds, spec);
      any_weighted = true;
    }
    layout.replicas.push_back(std::move(replica));
  }
  if (any_weighted) {
    std::vector<RankUnits> units;
    units.reserve(present.size());
    for (int d : present) units.push_back(layout.replicas[static_cast<std::size_t>(d)].units);
    layout.sync =
        expand_plan(strategy.plan_units(degrees, std::move(units), spec.spaces, spec.bytes),
                    present, spec.domains, spec.spaces.size())
            .sync;
  } else {
    layout.sync = std::move(plan.sync);
  }
  layout.spec = std::move(spec);
  return layout;
}

}  // namespace ntp::shard
