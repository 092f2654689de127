#include "elastic/sim/control_plane_sim.h"

#include <algorithm>
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
#include "elastic/sim/sim_formation.h"
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
  FormationWorld formation;
  explicit World(const SimConfig& c)
      : config(c), store(loop, c.store), host(loop, c.host_cores), formation(loop, host) {
    formation.connect_per_link = c.connect_per_link;
    formation.dial_round_trip = c.dial_round_trip;
    formation.link_round_trip = c.link_round_trip;
    // A member's CPU to take in a message its thread was blocked on: a store op's reply plus
    // the wake (SimConfig::wake_cpu).
    formation.woken_cpu = c.cpu_per_op + c.wake_cpu;
    formation.seed = c.seed;
  }

  StoreLink link() {
    return StoreLink{&loop, &store, &host, config.cpu_per_op, nullptr, config.wake_cpu};
  }
};

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
        formation_(w.formation, id, link_, running_),
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
  // Inside the agreement: when it last entered an epoch (about to announce itself), and, on the
  // decider, when it last decided a list (before publishing it).
  std::optional<Time> announced, decided;
  bool fired_early = false;
  std::optional<MemberList> agreed_list;
  std::string error;
  Time fault_at = Time::max();
  const std::string& failure() const { return error; }
  SimFormation& formation() { return formation_; }
  const SimFormation& formation() const { return formation_; }

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

  World& w_;
  int id_;
  StoreLink link_;
  Progress progress_;
  std::shared_ptr<bool> running_ = std::make_shared<bool>(true);
  IoSlot agree_io_;
  AgreementMachine agreement_;
  SimFormation formation_;
  SimWatch watch_;
  MemberList last_;
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

// comm/pair_mesh.h's formation (sim/sim_formation.h) of its four groups over the job's store;
// past their barriers, the epoch's done key.
void Member::form(const MemberList& list) {
  const std::vector<int>& m = list.members;
  const int me = static_cast<int>(std::find(m.begin(), m.end(), id_) - m.begin());
  const int size = static_cast<int>(m.size());
  std::vector<FormedGroup> groups = ListGroups(list, w_.config.tp).of(id_);
  std::set<int> peers;  // mesh ranks
  for (const FormedGroup& group : groups) {
    const std::vector<int>& ranks = *group.ranks;
    const int index = static_cast<int>(std::find(ranks.begin(), ranks.end(), me) - ranks.begin());
    const int group_size = static_cast<int>(ranks.size());
    const std::vector<int> links =
        group.name == "world" ? comm::formation_links({}, me, size, kFullMeshMaxSize)
                              : comm::formation_links(ranks, index, group_size, kFullMeshMaxSize);
    peers.insert(links.begin(), links.end());
  }
  peers.erase(me);
  const std::string prefix = std::string(kGroup) + "/e" + std::to_string(list.epoch);
  formation_.form(std::make_shared<const MemberList>(list), std::move(groups), peers, prefix,
                  running_, [this, list] {
                    drive(link_, agree_io_, agreement_.mark_done(list), running_, [this](Status s) {
                      if (!s.ok()) error = s.to_string();
                      formed = w_.loop.now();
                    });
                  });
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
  const auto linked_at = [](const Member& m) { return m.formation().linked; };
  const auto passed_at = [](const Member& m) { return m.formation().passed; };
  const std::optional<Time> agreed = last_of(members, victims, &Member::agreed),
                            linked = last_of(members, victims, linked_at),
                            passed = last_of(members, victims, passed_at),
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
  for (const auto& m : members) w.formation.members.push_back(&m->formation());
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
