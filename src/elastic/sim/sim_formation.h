// A member's formation of its groups (comm/pair_mesh.h, as train/job.cpp's build_job asks for
// them), as both simulators model it: the flat protocol's members (control_plane_sim.cpp) and the
// hierarchy's (hierarchy_sim.cpp), which differ only in which store the addresses go through and
// who carries those of links across domains.
//
// The model: the member publishes one address per link in one batch, reads its peers' with polls
// from 1 ms doubling to 100 ms, erases what it read (sim/address_exchange.h), then dials, one
// after another, the links whose peer's end has the greater port (Gloo's rule: the greater
// address dials; every pair end listens on a new ephemeral port, drawn here from the seed),
// while its other links wait for their peer's dial. With every link up it passes a barrier in
// each of its groups (world, TP, sync, DP), message by message (sim/sim_barrier.h).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "core/non_copyable.h"
#include "elastic/member_list.h"
#include "elastic/sim/event_loop.h"
#include "elastic/sim/host_cpu.h"
#include "elastic/sim/sim_barrier.h"
#include "elastic/sim/sim_link.h"

namespace ntp::elastic::sim {

// One of a member's groups on a list: its name and its ranks (indices into list.members,
// increasing), shared by every member of the group.
struct FormedGroup {
  std::string name;
  std::shared_ptr<const std::vector<int>> ranks;
};

// build_job's groups on a list (train/job.cpp), each built once for all its members: at 102,384
// GPUs a copy of the world's ranks per member would be 10^10 ints.
class ListGroups {
 public:
  ListGroups(const MemberList& list, int tp);
  // Member `id`'s groups, in the order it forms them: the world, the TP and sync groups (both its
  // replica: ids id / tp * tp ...), the DP group (its slot in every replica).
  std::vector<FormedGroup> of(int id) const;
  // The DP group of slot position `slot` (elastic::dp_group_ranks).
  const std::vector<int>& dp(int slot) const { return *slots_.at(slot); }

 private:
  int tp_;
  std::shared_ptr<const std::vector<int>> world_;
  std::map<int, std::shared_ptr<const std::vector<int>>> replicas_;  // by id / tp
  std::map<int, std::shared_ptr<const std::vector<int>>> slots_;     // by id % tp
};

// The port member `id`'s end of its link to `peer` listens on in `epoch`'s formation: each Gloo
// pair binds a listening socket of its own (an ephemeral port), so which end of a link dials
// (the greater address) is drawn anew for every link and formation.
std::uint64_t link_port(std::uint64_t seed, int epoch, int id, int peer);

class SimFormation;

// What every member's formation shares in one run.
struct FormationWorld : NonCopyable {
  FormationWorld(EventLoop& l, HostCpu& h) : loop(l), host(h) {}

  EventLoop& loop;
  HostCpu& host;
  Duration connect_per_link{0};  // a member's CPU per link it sets up (each end)
  Duration dial_round_trip{0};   // a dial's round trip
  Duration link_round_trip{0};   // a barrier message's round trip
  Duration woken_cpu{0};         // a member's CPU to take in a message its thread waited on
  std::uint64_t seed = 1;
  std::vector<SimFormation*> members;  // by id, for the links a member dials to another
  // The barriers of the formations under way, by epoch and group name (comm/gloo_collectives).
  std::map<std::pair<int, std::string>, std::unique_ptr<SimBarrier>> barriers;

  // Group `name`'s barrier in `epoch`'s formation on `list`, over its `ranks`.
  SimBarrier& barrier(int epoch, const std::string& name, const MemberList& list,
                      const std::vector<int>& ranks);
};

class SimFormation : NonCopyable {
 public:
  // `running`: false once the member is dead (it then takes no dial and sends nothing).
  SimFormation(FormationWorld& w, int id, StoreLink link, std::shared_ptr<bool> running)
      : w_(w), id_(id), link_(std::move(link)), running_(std::move(running)) {}

  // Forms `groups` on `list`: its links to the mesh ranks `peers`, their addresses under
  // `prefix` on its store (comm::pair_address_key); `formed` runs once past the last group's
  // barrier, unless `*live` turned false (a later formation replaced this one) or the member
  // died first.
  void form(std::shared_ptr<const MemberList> list, std::vector<FormedGroup> groups,
            const std::set<int>& peers, const std::string& prefix, std::shared_ptr<bool> live,
            std::function<void()> formed);
  // A peer's dial of a link to this member in `epoch`'s formation reached it; `accepted` runs
  // once its device took the connection in.
  void dialled(int epoch, std::function<void()> accepted);
  bool running() const { return *running_; }
  // `fn` as the member runs it: held while its process is paused (StoreLink::as_member).
  std::function<void()> as_member(std::function<void()> fn) const {
    return link_.as_member(std::move(fn));
  }

  std::optional<Time> linked, passed;  // its links up; past its groups' barriers (the last form)

 private:
  struct Forming;
  void dial(std::shared_ptr<Forming> f, size_t next);
  void link_up(const std::shared_ptr<Forming>& f);
  void pass_barriers(std::shared_ptr<Forming> f, size_t next);
  // `f` is the formation under way, live, of a running member.
  bool current(const std::shared_ptr<Forming>& f) const;

  FormationWorld& w_;
  int id_;
  StoreLink link_;
  std::shared_ptr<bool> running_;
  std::shared_ptr<Forming> forming_;  // the formation under way, or the last one
};

// What SimFormation holds of one formation.
struct SimFormation::Forming {
  std::shared_ptr<const MemberList> list;
  std::vector<FormedGroup> groups;
  std::vector<int> dials;  // member ids, in rank order
  int links_pending = 0;   // its links not up yet (dialled by either end), and the exchange
  std::shared_ptr<bool> live;
  std::function<void()> formed;
};

}  // namespace ntp::elastic::sim
