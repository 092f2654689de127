#include "train/state_reshard.h"

#include <algorithm>
#include <map>
#include <optional>

#include "core/check.h"
#include "shard/reshard_plan.h"
#include "train/unit_blocks.h"
#include "train/worker_role.h"

namespace ntp::train {
namespace {

// The tensors a unit's state consists of, for param i of `state`: the value and, with a
// replicated optimizer, both moments.
std::vector<float*> state_tensors(HeldState& state, size_t i) {
  model::Param& p = (*state.params)[i];
  if (state.adamw == nullptr) return {p.value.data()};
  return {p.value.data(), state.adamw->exp_avg(i).data(), state.adamw->exp_avg_sq(i).data()};
}

// What `slot` stores of a tensor in `layout`: its units of the tensor's space (with the copies of
// a derived space's groups, WorkerRole::held), or every row of a replicated tensor.
shard::IntervalSet held_units(const shard::ClusterLayout& layout, shard::SlotRef slot,
                              const ParamGeometry& g) {
  if (g.space < 0) return shard::IntervalSet::range(0, g.units);
  return held_units_of(layout, slot, g.space);
}

bool active_in(const shard::ClusterLayout& layout, shard::SlotRef slot) {
  const auto& slots = layout.replicas[static_cast<size_t>(slot.domain)].slots;
  return std::find(slots.begin(), slots.end(), slot.slot) != slots.end();
}

}  // namespace

std::vector<shard::ShardTransfer> derived_transfers(const shard::ClusterLayout& from,
                                                    const shard::ClusterLayout& to,
                                                    const std::vector<shard::SlotRef>& world) {
  std::vector<shard::SlotRef> survivors;
  for (const shard::SlotRef& s : world) {
    if (active_in(from, s)) survivors.push_back(s);
  }
  const int domains = to.spec.domains;
  std::vector<shard::ShardTransfer> out;
  for (size_t sp = 0; sp < to.spec.spaces.size(); ++sp) {
    const shard::UnitSpace& space = to.spec.spaces[sp];
    if (!space.derived()) continue;
    std::vector<shard::IntervalSet> stored_before;
    for (const shard::SlotRef& s : survivors) {
      stored_before.push_back(held_units_of(from, s, static_cast<int>(sp)));
    }
    std::vector<int64_t> sent(survivors.size(), 0);  // groups each survivor sends so far
    for (const shard::SlotRef& dst : world) {
      const shard::IntervalSet had = active_in(from, dst)
                                         ? held_units_of(from, dst, static_cast<int>(sp))
                                         : shard::IntervalSet{};
      const shard::IntervalSet wanted = subtract(held_units_of(to, dst, static_cast<int>(sp)), had);
      std::map<size_t, shard::IntervalSet> by_source;  // survivor index -> groups
      for (int64_t g : wanted.ids()) {
        for (int step = 0; step < domains; ++step) {
          const int domain = (dst.domain + step) % domains;
          std::optional<size_t> source;  // the holder in `domain` that sends least so far
          for (size_t k = 0; k < survivors.size(); ++k) {
            if (survivors[k].domain != domain || !stored_before[k].contains(g)) continue;
            if (!source || sent[k] < sent[*source]) source = k;
          }
          if (!source) continue;
          ++sent[*source];
          by_source[*source].append(g, g + 1);
          break;
        }
      }
      for (auto& [k, units] : by_source) {
        out.push_back({static_cast<int>(sp), survivors[k], dst, std::move(units), 0});
      }
    }
  }
  return out;
}

namespace {

// The survivors (slots of `world` active in `from`) of the nearest domain to `joiner` that has
// any: its own first, then the next domains'.
std::vector<shard::SlotRef> nearest_survivors(const shard::ClusterLayout& from,
                                              const std::vector<shard::SlotRef>& world,
                                              shard::SlotRef joiner) {
  const int domains = from.spec.domains;
  std::vector<shard::SlotRef> near;
  for (int step = 0; step < domains && near.empty(); ++step) {
    const int domain = (joiner.domain + step) % domains;
    for (const shard::SlotRef& s : world) {
      if (s.domain == domain && active_in(from, s)) near.push_back(s);
    }
  }
  return near;
}

// `rows` rows in contiguous shares over `near`, in order (the first rows % near one row more).
std::vector<std::pair<shard::SlotRef, shard::IntervalSet>> row_shares(
    const std::vector<shard::SlotRef>& near, int64_t rows) {
  std::vector<std::pair<shard::SlotRef, shard::IntervalSet>> out;
  const auto k = static_cast<int64_t>(near.size());
  int64_t begin = 0;
  for (int64_t i = 0; i < k; ++i) {
    const int64_t end = begin + rows / k + (i < rows % k ? 1 : 0);
    if (end > begin) {
      out.emplace_back(near[static_cast<size_t>(i)], shard::IntervalSet::range(begin, end));
    }
    begin = end;
  }
  return out;
}

}  // namespace

std::vector<std::pair<shard::SlotRef, shard::IntervalSet>> replicated_sources(
    const shard::ClusterLayout& from, const std::vector<shard::SlotRef>& world,
    shard::SlotRef joiner, int64_t rows) {
  return row_shares(nearest_survivors(from, world, joiner), rows);
}

namespace {

// What one transfer carries: for each tensor of the space (or each replicated tensor), the
// value, exp_avg and exp_avg_sq blocks of the moved units, in parameter order.
struct Payload {
  std::vector<std::pair<size_t, shard::IntervalSet>> blocks;  // (param, units)
  int64_t elements(const std::vector<ParamGeometry>& g, int64_t tensors) const {
    int64_t n = 0;
    for (const auto& [i, units] : blocks) n += tensors * g[i].outer * units.count() * g[i].inner;
    return n;
  }
};

}  // namespace

Result<ReshardStats> execute_state_reshard(const shard::ClusterLayout& from_layout,
                                           const shard::ClusterLayout& to_layout, shard::SlotRef me,
                                           const HeldState* from, HeldState to,
                                           comm::Communicator& world) {
  NTP_ASSIGN_OR_RETURN(shard::ReshardPlan plan, shard::plan_reshard(from_layout, to_layout));
  const std::vector<shard::SlotRef> world_slots = active_slots(to_layout);
  const auto world_rank = [&](shard::SlotRef s) {
    return static_cast<size_t>(std::lower_bound(world_slots.begin(), world_slots.end(), s) -
                               world_slots.begin());
  };
  const size_t n = world_slots.size();
  std::vector<ParamGeometry> geometry;
  for (const model::Param& p : *to.params) geometry.push_back(ParamGeometry::of(p));

  // Payloads this worker sends to / receives from each world rank, in the plan's order (a derived
  // space's groups by derived_transfers instead).
  std::erase_if(plan.transfers, [&](const shard::ShardTransfer& t) {
    return to_layout.spec.spaces[static_cast<size_t>(t.space)].derived();
  });
  for (shard::ShardTransfer& t : derived_transfers(from_layout, to_layout, world_slots)) {
    plan.transfers.push_back(std::move(t));
  }
  std::vector<Payload> send(n), recv(n);
  for (const shard::ShardTransfer& t : plan.transfers) {
    const bool sending = t.source == me, receiving = t.destination == me;
    if (!sending && !receiving) continue;
    for (size_t i = 0; i < geometry.size(); ++i) {
      if (geometry[i].space != t.space) continue;
      if (sending) send[world_rank(t.destination)].blocks.emplace_back(i, t.units);
      if (receiving) recv[world_rank(t.source)].blocks.emplace_back(i, t.units);
    }
  }
  // Replicated tensors for slots that held nothing: shares from the nearest survivors.
  for (const shard::SlotRef& s : world_slots) {
    if (active_in(from_layout, s)) continue;
    const std::vector<shard::SlotRef> near = nearest_survivors(from_layout, world_slots, s);
    if (near.empty()) return unavailable("no slot of the old layout survived");
    for (size_t i = 0; i < geometry.size(); ++i) {
      if (geometry[i].space >= 0) continue;
      for (const auto& [source, rows] : row_shares(near, geometry[i].units)) {
        if (source == me) send[world_rank(s)].blocks.emplace_back(i, rows);
        if (s == me) recv[world_rank(source)].blocks.emplace_back(i, rows);
      }
    }
  }

  NTP_CHECK(from == nullptr || (from->adamw == nullptr) == (to.adamw == nullptr));
  const int64_t tensors = to.adamw != nullptr ? 3 : 1;
  ReshardStats stats;
  std::vector<size_t> send_counts(n), recv_counts(n);
  size_t send_total = 0, recv_total = 0;
  for (size_t r = 0; r < n; ++r) {
    send_total += send_counts[r] = static_cast<size_t>(send[r].elements(geometry, tensors));
    recv_total += recv_counts[r] = static_cast<size_t>(recv[r].elements(geometry, tensors));
  }
  std::vector<float> out(send_total), in(recv_total);
  HeldState old = from != nullptr ? *from : HeldState{};
  size_t offset = 0;
  for (size_t r = 0; r < n; ++r) {
    for (const auto& [i, units] : send[r].blocks) {
      const std::vector<float*> src = state_tensors(old, i);
      const Block here = local_block(static_cast<int>(i), held_units(from_layout, me, geometry[i]));
      for (float* tensor : src) {
        const Block there{static_cast<int>(i), units, static_cast<int64_t>(offset)};
        copy_shared_units(geometry[i], here, tensor, there, out.data());
        offset += static_cast<size_t>(geometry[i].outer * units.count() * geometry[i].inner);
      }
    }
  }
  NTP_RETURN_IF_ERROR(
      world.alltoallv(comm::const_view(out), send_counts, comm::view(in), recv_counts));
  stats.bytes_received = static_cast<int64_t>(recv_total * sizeof(float));

  // Kept units (and replicated tensors) straight from the old model, then the received ones.
  for (size_t i = 0; i < geometry.size() && from != nullptr; ++i) {
    const shard::IntervalSet old_units = held_units(from_layout, me, geometry[i]);
    const shard::IntervalSet new_units = held_units(to_layout, me, geometry[i]);
    const std::vector<float*> src = state_tensors(old, i), dst = state_tensors(to, i);
    for (size_t k = 0; k < src.size(); ++k) {
      copy_shared_units(geometry[i], local_block(static_cast<int>(i), old_units), src[k],
                        local_block(static_cast<int>(i), new_units), dst[k]);
    }
  }
  offset = 0;
  for (size_t r = 0; r < n; ++r) {
    for (const auto& [i, units] : recv[r].blocks) {
      const shard::IntervalSet mine = held_units(to_layout, me, geometry[i]);
      for (float* tensor : state_tensors(to, i)) {
        const Block there{static_cast<int>(i), units, static_cast<int64_t>(offset)};
        copy_shared_units(geometry[i], there, in.data(), local_block(static_cast<int>(i), mine),
                          tensor);
        offset += static_cast<size_t>(geometry[i].outer * units.count() * geometry[i].inner);
      }
    }
  }
  return stats;
}

}  // namespace ntp::train
