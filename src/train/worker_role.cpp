#include "train/worker_role.h"

#include <algorithm>
#include <map>
#include <tuple>

namespace ntp::train {

shard::ModelShape model_shape(const model::ModelConfig& config) {
  shard::ModelShape shape;
  shape.heads = config.n_head;
  shape.hidden = config.n_embd;
  shape.ffn = config.ffn();
  shape.ffn_block = config.ffn_unit;
  shape.vocab = config.vocab_size;
  shape.layers = config.n_layer;
  shape.kv_heads = config.grouped_kv_heads();
  shape.head_dim = config.grouped_kv_heads() > 0 ? config.head_size() : 0;
  shape.experts = config.family == model::ModelFamily::kMoe ? config.n_experts : 0;
  shape.shared_experts = config.family == model::ModelFamily::kMoe ? config.n_shared_experts : 0;
  return shape;
}

shard::IntervalSet held_derived_units(const shard::UnitSpace& space,
                                      const shard::IntervalSet& source) {
  shard::IntervalSet held;
  for (int64_t g = 0; g < space.units; ++g) {
    const shard::IntervalSet reads =
        shard::IntervalSet::range(g * space.source_stride, (g + 1) * space.source_stride);
    if (intersection_count(source, reads) > 0) held.append(g, g + 1);
  }
  return held;
}

shard::IntervalSet held_units_of(const shard::ClusterLayout& layout, shard::SlotRef slot,
                                 int space) {
  const shard::ReplicaLayout& r = layout.replicas[static_cast<size_t>(slot.domain)];
  const auto k =
      static_cast<size_t>(std::find(r.slots.begin(), r.slots.end(), slot.slot) - r.slots.begin());
  if (k == r.slots.size()) return {};
  const shard::UnitSpace& s = layout.spec.spaces[static_cast<size_t>(space)];
  if (!s.derived()) return r.units[static_cast<size_t>(space)][k];
  return held_derived_units(s, r.units[static_cast<size_t>(s.derived_from)][k]);
}

std::vector<shard::SlotRef> active_slots(const shard::ClusterLayout& layout) {
  std::vector<shard::SlotRef> out;
  for (int d = 0; d < layout.spec.domains; ++d) {
    for (int l : layout.spec.healthy_slots(d)) out.push_back({d, l});
  }
  return out;
}

namespace {

// The job-wide DP sets: every distinct member list of the sync plan's groups and of the
// replicated parts, ordered by their first slice (space, partition; replicated parts last).
std::vector<DpSet> job_dp_sets(const shard::ClusterLayout& layout,
                               const std::vector<shard::SlotRef>& world, int replicated_parts) {
  auto world_rank = [&](int domain, int tp_rank) {
    const shard::SlotRef slot{
        domain, layout.replicas[static_cast<size_t>(domain)].slots[static_cast<size_t>(tp_rank)]};
    return static_cast<int>(std::lower_bound(world.begin(), world.end(), slot) - world.begin());
  };
  using Key = std::tuple<int, int>;  // (space, partition) of the set's first slice
  std::map<std::vector<int>, std::pair<Key, std::vector<DpSlice>>> by_members;
  auto add = [&](std::vector<int> members, Key key, DpSlice slice) {
    auto [it, inserted] = by_members.try_emplace(std::move(members), key, std::vector<DpSlice>{});
    if (!inserted) it->second.first = std::min(it->second.first, key);
    it->second.second.push_back(std::move(slice));
  };
  for (const shard::DpGroup& g : layout.sync.groups) {
    std::vector<int> members;
    for (const shard::RankRef& m : g.members) members.push_back(world_rank(m.domain, m.rank));
    add(std::move(members), {g.space, g.index}, DpSlice{g.space, g.units, 0});
  }
  const int spaces = static_cast<int>(layout.spec.spaces.size());
  for (int p = 0; p < replicated_parts; ++p) {
    std::vector<int> members;
    for (int d = 0; d < layout.spec.domains; ++d) {
      if (!layout.spec.has_left(d)) members.push_back(world_rank(d, p));
    }
    add(std::move(members), {spaces, p}, DpSlice{DpSlice::kReplicated, {}, p});
  }
  std::vector<std::pair<Key, DpSet>> sets;
  for (auto& [members, entry] : by_members) {
    DpSet set;
    set.world_ranks = members;
    set.slices = std::move(entry.second);
    sets.emplace_back(entry.first, std::move(set));
  }
  std::sort(sets.begin(), sets.end(),
            [](const auto& a, const auto& b) { return a.first < b.first; });
  std::vector<DpSet> out;
  for (auto& [key, set] : sets) {
    set.name = "dp" + std::to_string(out.size());
    out.push_back(std::move(set));
  }
  return out;
}

// held and shared_owned (worker_role.h): group g of a derived space is read by source units
// [g * stride, (g + 1) * stride); it is held by every rank with one of them.
void fill_copies(const std::vector<shard::UnitSpace>& spaces, const shard::RankUnits& units,
                 WorkerRole& role) {
  const auto degree = static_cast<size_t>(role.degree);
  for (size_t sp = 0; sp < spaces.size(); ++sp) {
    const shard::UnitSpace& space = spaces[sp];
    role.shared_owned.emplace_back(degree);
    if (!space.derived()) {
      role.held.push_back(role.units[sp]);
      continue;
    }
    const auto& source = units[static_cast<size_t>(space.derived_from)];
    for (int64_t g = 0; g < space.units; ++g) {
      const shard::IntervalSet reads =
          shard::IntervalSet::range(g * space.source_stride, (g + 1) * space.source_stride);
      std::vector<size_t> holders;
      for (size_t r = 0; r < degree; ++r) {
        if (intersection_count(source[r], reads) > 0) holders.push_back(r);
      }
      if (holders.size() < 2) continue;
      for (size_t r = 0; r < degree; ++r) {
        if (units[sp][r].contains(g)) role.shared_owned[sp][r].append(g, g + 1);
      }
      role.replica_shares = true;
    }
    role.held.push_back(held_derived_units(space, source[static_cast<size_t>(role.tp_rank)]));
  }
}

}  // namespace

std::vector<int> WorkerRole::replica_members() const {
  std::vector<int> sorted = replica_world_ranks;
  std::sort(sorted.begin(), sorted.end());
  return sorted;
}

Result<WorkerRole> worker_role(const shard::ClusterLayout& layout, shard::SlotRef slot) {
  const shard::ClusterSpec& spec = layout.spec;
  if (slot.domain < 0 || slot.domain >= spec.domains || slot.slot < 0 ||
      slot.slot >= spec.domain_size) {
    return invalid_argument("slot " + std::to_string(slot.domain) + ":" +
                            std::to_string(slot.slot) + " is outside the cluster");
  }
  if (spec.is_failed(slot) || spec.has_left(slot.domain)) {
    return invalid_argument(
        "slot " + std::to_string(slot.domain) + ":" + std::to_string(slot.slot) +
        (spec.is_failed(slot) ? " is failed" : "'s replica left the job") + " and has no role");
  }
  const std::vector<shard::SlotRef> world = active_slots(layout);
  WorkerRole role;
  role.slot = slot;
  role.world_size = static_cast<int>(world.size());
  role.world_rank =
      static_cast<int>(std::lower_bound(world.begin(), world.end(), slot) - world.begin());
  role.replica = slot.domain;
  for (int d = 0; d < spec.domains; ++d) {
    if (spec.has_left(d)) continue;
    if (d < slot.domain) ++role.replica_index;
    ++role.replicas;
  }
  const shard::ReplicaLayout& replica = layout.replicas[static_cast<size_t>(slot.domain)];
  role.degree = replica.degree();
  role.tp_rank = static_cast<int>(std::find(replica.slots.begin(), replica.slots.end(), slot.slot) -
                                  replica.slots.begin());
  for (int l : replica.slots) {
    role.replica_world_ranks.push_back(static_cast<int>(
        std::lower_bound(world.begin(), world.end(), shard::SlotRef{slot.domain, l}) -
        world.begin()));
  }
  for (int c : role.replica_members()) {
    role.comm_tp_rank.push_back(static_cast<int>(
        std::find(role.replica_world_ranks.begin(), role.replica_world_ranks.end(), c) -
        role.replica_world_ranks.begin()));
  }
  int min_degree = spec.domain_size;
  for (const shard::ReplicaLayout& r : layout.replicas) {
    role.replica_degrees.push_back(r.degree());
    if (r.degree() > 0) min_degree = std::min(min_degree, r.degree());  // 0: the replica left
  }
  role.replicated_parts = min_degree;

  for (const auto& per_rank : replica.units) {
    role.units.push_back(per_rank[static_cast<size_t>(role.tp_rank)]);
  }
  fill_copies(spec.spaces, replica.units, role);
  // Layout space i is model::UnitSpaceId i (shard/unit_space.h); KV groups are derived by the
  // model from its query heads, so the shard does not list them.
  for (size_t sp = 0; sp < role.units.size(); ++sp) {
    const auto id = static_cast<model::UnitSpaceId>(sp);
    if (id != model::UnitSpaceId::kKvGroups) role.shard.units(id) = role.units[sp].ids();
  }

  for (const shard::FoldTransfer& f : layout.sync.folds) {
    if (f.domain != slot.domain) continue;
    role.replica_folds = true;
    if (f.from_rank == role.tp_rank) role.fold_out.push_back({f.space, f.to_rank, f.units});
    if (f.to_rank == role.tp_rank) role.fold_in.push_back({f.space, f.from_rank, f.units});
  }
  for (DpSet& set : job_dp_sets(layout, world, role.replicated_parts)) {
    auto me = std::find(set.world_ranks.begin(), set.world_ranks.end(), role.world_rank);
    if (me == set.world_ranks.end()) continue;
    set.my_index = static_cast<int>(me - set.world_ranks.begin());
    role.dp_sets.push_back(std::move(set));
  }
  return role;
}

}  // namespace ntp::train
