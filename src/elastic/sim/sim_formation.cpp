#include "elastic/sim/sim_formation.h"

#include <algorithm>

#include "comm/pair_mesh.h"
#include "elastic/sim/address_exchange.h"
#include "elastic/sim/sim_run.h"

namespace ntp::elastic::sim {

ListGroups::ListGroups(const MemberList& list, int tp) : tp_(tp) {
  auto world = std::make_shared<std::vector<int>>();
  std::map<int, std::vector<int>> replicas, slots;
  for (int r = 0; r < static_cast<int>(list.members.size()); ++r) {
    const int id = list.members[static_cast<size_t>(r)];
    world->push_back(r);
    replicas[id / tp].push_back(r);
    slots[id % tp].push_back(r);
  }
  world_ = std::move(world);
  for (auto& [replica, ranks] : replicas) {
    replicas_[replica] = std::make_shared<const std::vector<int>>(std::move(ranks));
  }
  for (auto& [slot, ranks] : slots) {
    slots_[slot] = std::make_shared<const std::vector<int>>(std::move(ranks));
  }
}

std::vector<FormedGroup> ListGroups::of(int id) const {
  const std::shared_ptr<const std::vector<int>>& replica = replicas_.at(id / tp_);
  return {{"world", world_},
          {"tp" + std::to_string(id / tp_), replica},
          {"sync" + std::to_string(id / tp_), replica},
          {"dp" + std::to_string(id % tp_), slots_.at(id % tp_)}};
}

std::uint64_t link_port(std::uint64_t seed, int epoch, int id, int peer) {
  std::uint64_t x = seed ^ (static_cast<std::uint64_t>(epoch) << 48) ^
                    (static_cast<std::uint64_t>(id) << 24) ^ static_cast<std::uint64_t>(peer) ^
                    0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;  // splitmix64's finalizer
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

SimBarrier& FormationWorld::barrier(int epoch, const std::string& name, const MemberList& list,
                                    const std::vector<int>& ranks) {
  std::unique_ptr<SimBarrier>& slot = barriers[{epoch, name}];
  if (slot) return *slot;
  const int n = static_cast<int>(ranks.size());
  std::vector<int> ids;  // the group's members, in rank order
  ids.reserve(ranks.size());
  for (int r : ranks) ids.push_back(list.members[static_cast<size_t>(r)]);
  // A message: half the link's round trip, then its receiver's CPU to take it in.
  auto deliver = [this, ids = std::move(ids)](int to, std::function<void()> taken) {
    SimFormation* receiver = members[static_cast<size_t>(ids[static_cast<size_t>(to)])];
    loop.after(link_round_trip / 2, [this, receiver, taken = std::move(taken)]() mutable {
      host.run(woken_cpu, receiver->as_member([receiver, taken = std::move(taken)] {
        if (receiver->running()) taken();
      }));
    });
  };
  slot = std::make_unique<SimBarrier>(n, n > kFullMeshMaxSize, std::move(deliver));
  return *slot;
}

bool SimFormation::current(const std::shared_ptr<Forming>& f) const {
  return *running_ && *f->live && f == forming_;
}

void SimFormation::form(std::shared_ptr<const MemberList> list, std::vector<FormedGroup> groups,
                        const std::set<int>& peers, const std::string& prefix,
                        std::shared_ptr<bool> live, std::function<void()> formed) {
  auto f = std::make_shared<Forming>();
  f->list = std::move(list);
  f->groups = std::move(groups);
  f->live = std::move(live);
  f->formed = std::move(formed);
  const int epoch = f->list->epoch;
  const std::vector<int>& m = f->list->members;
  const int me = static_cast<int>(std::lower_bound(m.begin(), m.end(), id_) - m.begin());
  std::vector<std::pair<std::string, std::string>> mine;
  std::vector<std::string> theirs;
  for (int peer : peers) {
    mine.emplace_back(comm::pair_address_key(prefix, me, peer), "addr");
    theirs.push_back(comm::pair_address_key(prefix, peer, me));
    const int peer_id = m[static_cast<size_t>(peer)];
    if (link_port(w_.seed, epoch, id_, peer_id) > link_port(w_.seed, epoch, peer_id, id_)) {
      f->dials.push_back(peer_id);
    }
  }
  // Pending: every link, and the address exchange itself (a link is up only once its own end
  // was connected, which it is after the exchange: PairMesh::finish_batch).
  f->links_pending = static_cast<int>(peers.size()) + 1;
  forming_ = f;
  exchange_addresses(link_, std::move(mine), std::move(theirs), f->live, [this, f] {
    if (!current(f)) return;
    dial(f, 0);
    link_up(f);
  });
}

// Dials f->dials[next], then the rest, one after another (Gloo's connect returns once the link
// is up): the dialer's CPU, half the round trip, the peer's device thread woken to accept, half
// the round trip back, the dialer's thread woken. The link is up at each end as it takes it in.
void SimFormation::dial(std::shared_ptr<Forming> f, size_t next) {
  if (next == f->dials.size() || !current(f)) return;
  const Duration half = w_.dial_round_trip / 2;
  w_.host.run(w_.connect_per_link, [this, f, next, half] {
    w_.loop.after(half, [this, f, next, half] {
      if (!*running_) return;
      w_.members[static_cast<size_t>(f->dials[next])]->dialled(
          f->list->epoch, [this, f, next, half] {
            w_.loop.after(half, [this, f, next] {
              w_.host.run(w_.woken_cpu, as_member([this, f, next] {
                            if (!current(f)) return;
                            link_up(f);
                            dial(f, next + 1);
                          }));
            });
          });
    });
  });
}

void SimFormation::dialled(int epoch, std::function<void()> accepted) {
  w_.host.run(w_.connect_per_link + w_.woken_cpu,
              as_member([this, epoch, accepted = std::move(accepted)] {
                if (!*running_) return;  // (a dead peer is not in the list: not dialled)
                if (forming_ && forming_->list->epoch == epoch && current(forming_)) {
                  link_up(forming_);
                }
                accepted();
              }));
}

// One more link of the formation up (or its address exchange done); with the last, the
// barriers.
void SimFormation::link_up(const std::shared_ptr<Forming>& f) {
  if (--f->links_pending > 0) return;
  linked = w_.loop.now();
  pass_barriers(f, 0);
}

// The barrier of group `next`, then of the next; after the last, the caller's `formed`.
void SimFormation::pass_barriers(std::shared_ptr<Forming> f, size_t next) {
  if (next == f->groups.size()) {
    passed = w_.loop.now();
    f->formed();
    return;
  }
  const FormedGroup& group = f->groups[next];
  const std::vector<int>& ids = f->list->members;
  const std::vector<int>& ranks = *group.ranks;
  const int me = static_cast<int>(std::lower_bound(ids.begin(), ids.end(), id_) - ids.begin());
  const int rank =
      static_cast<int>(std::lower_bound(ranks.begin(), ranks.end(), me) - ranks.begin());
  w_.barrier(f->list->epoch, group.name, *f->list, ranks).enter(rank, [this, f, next] {
    if (current(f)) pass_barriers(f, next + 1);
  });
}

}  // namespace ntp::elastic::sim
