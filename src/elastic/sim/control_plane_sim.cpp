#include "elastic/sim/control_plane_sim.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string_view>
#include <utility>
#include <vector>

#include "comm/exit_notice.h"
#include "comm/gloo_communicator.h"
#include "comm/survivors.h"
#include "core/check.h"
#include "elastic/agreement.h"
#include "elastic/agreement_machine.h"
#include "elastic/sim/address_exchange.h"
#include "elastic/sim/sim_barrier.h"
#include "elastic/sim/sim_link.h"
#include "elastic/sim/sim_run.h"
#include "elastic/sim/sim_watch.h"
#include "elastic/watch_machine.h"

namespace ntp::elastic::sim {
namespace {

constexpr const char* kGroup = "train/a0";

// What every member shares: the agenda, the store, the configuration.
struct World {
  const SimConfig& config;
  EventLoop loop;
  SimStore store;
  HostCpu host;
  std::vector<std::string> incarnations;  // every slot's first process
  std::vector<class Member*> members;     // by id, for the links a member dials to another
  // The barriers of the formations under way, by epoch and group name (comm/gloo_collectives).
  std::map<std::pair<int, std::string>, std::unique_ptr<SimBarrier>> barriers;
  explicit World(const SimConfig& c) : config(c), store(loop, c.store), host(loop, c.host_cores) {}

  // A member's CPU to take in a message its thread was blocked on: a store op's reply plus the
  // wake (SimConfig::wake_cpu).
  Duration woken_cpu() const { return config.cpu_per_op + config.wake_cpu; }
  // Group `name`'s barrier in `epoch`'s formation over `ids` (its members, in rank order).
  SimBarrier& barrier(int epoch, const std::string& name, std::vector<int> ids);
  StoreLink link() {
    return StoreLink{&loop, &store, &host, config.cpu_per_op, nullptr, config.wake_cpu};
  }
};

// build_job's groups of member `id` on `list`, in the order it forms them (train/job.cpp): the
// world, the TP and sync groups (both its replica), the DP group (its slot in every replica).
// Each as its name and its ranks (indices into list.members, increasing).
struct FormedGroup {
  std::string name;
  std::vector<int> ranks;
};
std::vector<FormedGroup> formed_groups(const MemberList& list, int id, int tp) {
  std::vector<FormedGroup> groups{{"world", {}},
                                  {"tp" + std::to_string(id / tp), {}},
                                  {"sync" + std::to_string(id / tp), {}},
                                  {"dp" + std::to_string(id % tp), {}}};
  for (int r = 0; r < static_cast<int>(list.members.size()); ++r) {
    const int other = list.members[static_cast<size_t>(r)];
    groups[0].ranks.push_back(r);
    if (other / tp == id / tp) {
      groups[1].ranks.push_back(r);
      groups[2].ranks.push_back(r);
    }
    if (other % tp == id % tp) groups[3].ranks.push_back(r);
  }
  return groups;
}

// The port member `id`'s end of its link to `peer` listens on in `epoch`'s formation: each Gloo
// pair binds a listening socket of its own (an ephemeral port), so which end of a link dials
// (the greater address) is drawn anew for every link and formation.
std::uint64_t link_port(std::uint64_t seed, int epoch, int id, int peer) {
  std::uint64_t x = seed ^ (static_cast<std::uint64_t>(epoch) << 48) ^
                    (static_cast<std::uint64_t>(id) << 24) ^ static_cast<std::uint64_t>(peer) ^
                    0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;  // splitmix64's finalizer
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

// One member: what an `ntp train` worker runs of the control plane (bench/elastic/bench_member.h
// runs the same against redis), each machine on an IoSlot of its own, its I/O through the world's
// store. A dead or hung member ignores every reply still on its way.
class Member {
 public:
  Member(World& w, int id)
      : w_(w),
        id_(id),
        link_(w.link()),
        agreement_(params(), agree_io_),
        watch_(link_, kGroup, id, w.config.hang_detect, &progress_, running_,
               [this](const std::string& reason) { fire(reason); }) {
    progress_.mark(Phase::kStep, 0);
    progress_.waiting(true);  // in the step's collective: waiting on its peers, not stuck
  }

  void start(Duration beat_offset) {
    watch_.start_beats(beat_offset, id_);
    const MemberList first = initial_list(all_ids(), w_.config.gpus);
    watch_.arm(first.epoch, first.members, w_.incarnations);
  }
  void stop(bool post_exit);
  bool running() const { return *running_; }
  bool fenced() const { return watch_.fenced(); }

  std::optional<Time> aborted, agreed, formed;
  std::optional<Time> linked, passed;  // its links up; past its groups' barriers
  // Inside the agreement: when it last entered an epoch (about to announce itself), and, on the
  // decider, when it last decided a list (before publishing it).
  std::optional<Time> announced, decided;
  bool fired_early = false;
  std::optional<MemberList> agreed_list;
  std::string error;
  Time fault_at = Time::max();
  const std::string& failure() const { return error; }

 private:
  AgreementParams params() {
    AgreementParams p;
    p.group = kGroup;
    p.me = id_;
    p.progress = &progress_;
    p.hang_detect = w_.config.hang_detect;
    p.window = 10 * w_.config.hang_detect;  // as train/live_run.cpp sets it
    p.incarnation = [](int who, const MemberList& list) {
      return comm::incarnation(0, list.restarts[static_cast<size_t>(who)]);
    };
    p.on_enter = [this](int) { announced = w_.loop.now(); };
    p.on_phase = [this](const char* phase, int) {
      if (std::string_view(phase) == "decider_publish") decided = w_.loop.now();
    };
    return p;
  }
  std::vector<int> all_ids() const {
    std::vector<int> ids(static_cast<size_t>(w_.config.gpus));
    for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int>(i);
    return ids;
  }
  void fire(const std::string& reason);
  // The training thread after its step failed: as LiveRun's re-formation does.
  void reform();
  void form(const MemberList& list);
  void dial(const MemberList& list, std::shared_ptr<const std::vector<int>> peers, size_t next);

 public:
  // A peer's dial of a link to this member in `epoch`'s formation reached it; `accepted` runs
  // once its device took the connection in.
  void dialled(int epoch, std::function<void()> accepted);

 private:
  void link_up(const MemberList& list);
  void pass_barriers(const MemberList& list, size_t next);

  World& w_;
  int id_;
  StoreLink link_;
  Progress progress_;
  std::shared_ptr<bool> running_ = std::make_shared<bool>(true);
  IoSlot agree_io_;
  AgreementMachine agreement_;
  SimWatch watch_;
  MemberList last_;
  // The formation under way: its epoch, and its links not up yet (dialled by either end).
  int forming_epoch_ = -1;
  int links_pending_ = 0;
  MemberList forming_;
};

void Member::stop(bool post_exit) {
  *running_ = false;
  if (!post_exit) return;
  // The launcher reaps the process and posts its exit notice (comm/exit_notice.h).
  const std::string who = w_.incarnations[static_cast<size_t>(id_)];
  link_.send(io::set(comm::exit_notice_key(id_), who), nullptr);
  link_.send(io::Append{comm::kLaunchEvents, "exit " + std::to_string(id_) + " " + who}, nullptr);
}

void Member::fire(const std::string& reason) {
  if (w_.loop.now() < fault_at) {
    fired_early = true;
    error = "fired at " + std::to_string(seconds(w_.loop.now() - Time{})) + " s: " + reason;
  }
  if (!aborted) {
    aborted = w_.loop.now();
    last_ = initial_list(all_ids(), w_.config.gpus);
    w_.loop.after(Duration(0), [this] { reform(); });
  }
}

void Member::reform() {
  if (!*running_) return;
  progress_.waiting(false);
  drive(link_, agree_io_, agreement_.report_failure(0), running_, [this](Status) {
    watch_.disarm();
    progress_.mark(Phase::kReform, 0);
    drive(link_, agree_io_,
          agreement_.agree(last_, Announcement{0, 0}, false, {},
                           [] { return std::string("sim layout"); }, {}),
          running_, [this](Result<MemberList> list) {
            if (!list.ok()) {
              error = list.status().to_string();
              return;
            }
            agreed = w_.loop.now();
            agreed_list = *list;
            watch_.arm(list->epoch, list->members, w_.incarnations);
            if (w_.config.form) {
              form(*list);
            } else {
              formed = agreed;
            }
          });
  });
}

// comm/pair_mesh.h's formation, modeled: the member publishes one address per link in one
// batch, reads its peers' with polls from 1 ms doubling to 100 ms, erases what it read, then
// dials, one after another, the links whose peer's end has the lower address (Gloo's rule: the
// greater address dials; every pair end listens on a new port, drawn here from the seed), while
// its other links wait for their peer's dial. With every link up it passes a barrier in each of its
// four groups (world, TP, sync, DP).
void Member::form(const MemberList& list) {
  const std::vector<int>& m = list.members;
  const int me = static_cast<int>(std::find(m.begin(), m.end(), id_) - m.begin());
  const int size = static_cast<int>(m.size());
  std::set<int> peers;  // mesh ranks
  for (const FormedGroup& group : formed_groups(list, id_, w_.config.tp)) {
    const int index = static_cast<int>(std::find(group.ranks.begin(), group.ranks.end(), me) -
                                       group.ranks.begin());
    const int group_size = static_cast<int>(group.ranks.size());
    const std::vector<int> links =
        group.name == "world"
            ? comm::formation_links({}, me, size, kFullMeshMaxSize)
            : comm::formation_links(group.ranks, index, group_size, kFullMeshMaxSize);
    peers.insert(links.begin(), links.end());
  }
  peers.erase(me);
  const std::string prefix = std::string(kGroup) + "/e" + std::to_string(list.epoch) + "/p/";
  std::vector<std::pair<std::string, std::string>> mine;
  std::vector<std::string> theirs;
  auto dials = std::make_shared<std::vector<int>>();  // member ids, in rank order
  const std::uint64_t seed = w_.config.seed;
  for (int peer : peers) {
    mine.emplace_back(prefix + std::to_string(me) + "/" + std::to_string(peer), "addr");
    theirs.push_back(prefix + std::to_string(peer) + "/" + std::to_string(me));
    const int peer_id = m[static_cast<size_t>(peer)];
    if (link_port(seed, list.epoch, id_, peer_id) > link_port(seed, list.epoch, peer_id, id_)) {
      dials->push_back(peer_id);
    }
  }
  // Pending: every link, and the address exchange itself (a link is up only once its own end
  // was connected, which it is after the exchange: PairMesh::finish_batch).
  forming_epoch_ = list.epoch;
  forming_ = list;
  links_pending_ = static_cast<int>(peers.size()) + 1;
  exchange_addresses(link_, std::move(mine), std::move(theirs), running_, [this, list, dials] {
    if (forming_epoch_ != list.epoch) return;
    dial(list, dials, 0);
    link_up(list);
  });
}

// Dials peers[next], then the rest, one after another (Gloo's connect returns once the link is
// up): the dialer's CPU, half the round trip, the peer's device thread woken to accept, half the
// round trip back, the dialer's thread woken. The link is up at each end as it takes it in.
void Member::dial(const MemberList& list, std::shared_ptr<const std::vector<int>> peers,
                  size_t next) {
  if (next == peers->size() || !*running_ || forming_epoch_ != list.epoch) return;
  const Duration half = w_.config.dial_round_trip / 2;
  w_.host.run(w_.config.connect_per_link, [this, list, peers, next, half, running = running_] {
    w_.loop.after(half, [this, list, peers, next, half, running] {
      if (!*running) return;
      w_.members[static_cast<size_t>((*peers)[next])]->dialled(list.epoch, [=, this] {
        w_.loop.after(half, [=, this] {
          w_.host.run(w_.woken_cpu(), [=, this] {
            if (!*running || forming_epoch_ != list.epoch) return;
            link_up(list);
            dial(list, peers, next + 1);
          });
        });
      });
    });
  });
}

void Member::dialled(int epoch, std::function<void()> accepted) {
  w_.host.run(w_.config.connect_per_link + w_.woken_cpu(),
              [this, epoch, accepted = std::move(accepted), running = running_] {
                if (!*running) return;  // (a dead peer is not in the list: not dialled)
                if (epoch == forming_epoch_) link_up(forming_);
                accepted();
              });
}

// One more link of `list`'s formation up (or its address exchange done); with the last, the
// barriers.
void Member::link_up(const MemberList& list) {
  if (--links_pending_ > 0) return;
  linked = w_.loop.now();
  pass_barriers(list, 0);
}

// The barrier of group `next` of formed_groups, then of the next; after the last, the done key.
void Member::pass_barriers(const MemberList& list, size_t next) {
  const std::vector<FormedGroup> groups = formed_groups(list, id_, w_.config.tp);
  if (next == groups.size()) {
    passed = w_.loop.now();
    drive(link_, agree_io_, agreement_.mark_done(list), running_, [this](Status s) {
      if (!s.ok()) error = s.to_string();
      formed = w_.loop.now();
    });
    return;
  }
  const FormedGroup& group = groups[next];
  std::vector<int> ids;  // the group's members, in rank order
  for (int r : group.ranks) ids.push_back(list.members[static_cast<size_t>(r)]);
  const int rank = static_cast<int>(std::find(ids.begin(), ids.end(), id_) - ids.begin());
  w_.barrier(list.epoch, group.name, std::move(ids))
      .enter(rank, [this, list, next, running = running_] {
        if (*running) pass_barriers(list, next + 1);
      });
}

SimBarrier& World::barrier(int epoch, const std::string& name, std::vector<int> ids) {
  std::unique_ptr<SimBarrier>& slot = barriers[{epoch, name}];
  if (slot) return *slot;
  const int n = static_cast<int>(ids.size());
  // A message: half the link's round trip, then its receiver's CPU to take it in.
  auto deliver = [this, ids = std::move(ids)](int to, std::function<void()> taken) {
    Member* receiver = members[static_cast<size_t>(ids[static_cast<size_t>(to)])];
    loop.after(config.link_round_trip / 2, [this, receiver, taken = std::move(taken)]() mutable {
      host.run(woken_cpu(), [receiver, taken = std::move(taken)] {
        if (receiver->running()) taken();
      });
    });
  };
  slot = std::make_unique<SimBarrier>(n, n > kFullMeshMaxSize, std::move(deliver));
  return *slot;
}

// SimResult's parts of the agreement (agree_announce_s, ...), when they follow in their order.
void set_agree_parts(SimResult& out, const std::vector<std::unique_ptr<Member>>& members,
                     const std::set<int>& victims) {
  const std::optional<Time> aborted = last_of(members, victims, &Member::aborted),
                            announced = last_of(members, victims, &Member::announced),
                            agreed = last_of(members, victims, &Member::agreed);
  std::optional<Time> decided;
  for (size_t i = 0; i < members.size(); ++i) {
    const std::optional<Time>& d = members[i]->decided;
    if (victims.count(static_cast<int>(i)) == 0 && d && (!decided || *d > *decided)) decided = d;
  }
  if (!aborted || !announced || !decided || !agreed) return;
  if (!(*aborted <= *announced && *announced <= *decided && *decided <= *agreed)) return;
  out.agree_announce_s = seconds(*announced - *aborted);
  out.agree_decide_s = seconds(*decided - *announced);
  out.agree_take_s = seconds(*agreed - *decided);
}

// SimResult's parts of the formation (form_link_s, ...).
void set_form_parts(SimResult& out, const std::vector<std::unique_ptr<Member>>& members,
                    const std::set<int>& victims) {
  const std::optional<Time> agreed = last_of(members, victims, &Member::agreed),
                            linked = last_of(members, victims, &Member::linked),
                            passed = last_of(members, victims, &Member::passed),
                            formed = last_of(members, victims, &Member::formed);
  if (!agreed || !linked || !passed || !formed) return;
  out.form_link_s = seconds(*linked - *agreed);
  out.form_barrier_s = seconds(*passed - *linked);
  out.form_done_s = seconds(*formed - *passed);
}

// The invariants of one run; "ok" or the first violation.
std::string check(const std::vector<std::unique_ptr<Member>>& members, int victim,
                  const SimStore& store, const std::map<std::string, int>& list_writes) {
  std::optional<MemberList> first;
  for (size_t i = 0; i < members.size(); ++i) {
    if (static_cast<int>(i) == victim) continue;
    const Member& m = *members[i];
    const std::string who = "member " + std::to_string(i);
    if (std::string fault = survivor_fault(m, who); !fault.empty()) return fault;
    if (!m.agreed_list) return who + " agreed on no list";
    if (!m.formed) return who + " did not form its groups";
    if (!first) first = *m.agreed_list;
    if (m.agreed_list->epoch != first->epoch || m.agreed_list->members != first->members) {
      return who + " agreed on another list than member " + std::to_string(first->members[0]);
    }
  }
  if (!first) return "no survivor";
  if (first->has(victim)) return "the victim is in the agreed list";
  if (first->members.size() + 1 != members.size()) return "a survivor is missing from the list";
  const std::string* published = store.value(epoch_key(kGroup, first->epoch, "list"));
  if (published == nullptr || *published != encode(*first)) {
    return "the store's list of epoch " + std::to_string(first->epoch) + " is not the agreed one";
  }
  for (const auto& [key, writes] : list_writes) {
    if (writes > 1) return key + " was published " + std::to_string(writes) + " times";
  }
  return "ok";
}

}  // namespace

SimResult simulate(const SimConfig& c) {
  if (c.hierarchy) return simulate_hierarchy(c);
  NTP_CHECK_MSG(c.fault == Fault::kKill || c.fault == Fault::kHang,
                "a leader's fault needs the hierarchy");
  NTP_CHECK_MSG(c.steady >= std::chrono::milliseconds(2500), "steady: at least 2.5 s");
  NTP_CHECK_MSG(c.gpus >= 2, "gpus: at least 2");
  World w(c);
  std::map<std::string, int> list_writes;  // member lists published, per key (not tombstones)
  w.store.observe_writes([&list_writes](const std::string& key, const std::string& value) {
    if (key.size() > 5 && key.compare(key.size() - 5, 5, "/list") == 0 &&
        !decode_tombstone(value)) {
      ++list_writes[key];
    }
  });
  w.incarnations.assign(static_cast<size_t>(c.gpus), comm::incarnation(0, 0));
  SimResult out;
  const SteadyWindow window = steady_window(c);
  const Time fault_at = window.fault_at;
  const double steady_s = window.seconds;
  const std::vector<std::unique_ptr<Member>> members = start_members<Member>(w, c, window, out);
  for (const auto& m : members) w.members.push_back(m.get());
  const std::int64_t ops_before = w.store.counts().ops;
  const std::map<std::string, std::int64_t> kinds_before = w.store.counts().by_kind;
  const int victim = c.gpus / 2;  // as control_plane_bench: a member in the middle of the ring
  out.victim = victim;
  const std::set<int> victims{victim};
  for (auto& m : members) m->fault_at = fault_at;
  std::int64_t ops_at_fault = 0;
  w.loop.at(fault_at, [&] {
    out.steady_store_ops_per_s = static_cast<double>(w.store.counts().ops - ops_before) / steady_s;
    out.steady_ops_by_kind = kinds_since(kinds_before, w.store.counts().by_kind);  // in 2 s
    ops_at_fault = w.store.counts().ops;
    w.store.set_service_rate(c.store.ops_per_s / c.slow_store_factor);
    members[static_cast<size_t>(victim)]->stop(c.fault == Fault::kKill);
  });
  out.events += w.loop.run_until(
      fault_at + c.limit, [&] { return last_of(members, victims, &Member::formed).has_value(); });
  out.recovery_store_ops = w.store.counts().ops - ops_at_fault;
  out.peak_store_queue = w.store.counts().peak_queue;
  set_phases(out, members, victims, fault_at);
  set_agree_parts(out, members, victims);
  set_form_parts(out, members, victims);
  for (size_t i = 0; i < members.size(); ++i) {
    if (static_cast<int>(i) != victim && members[i]->agreed_list) {
      out.agreed_epoch = members[i]->agreed_list->epoch;
      break;
    }
  }
  out.invariants = check(members, victim, w.store, list_writes);
  return out;
}

}  // namespace ntp::elastic::sim
