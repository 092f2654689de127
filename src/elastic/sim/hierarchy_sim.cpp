// control_plane_sim with the domain hierarchy (docs/design/control-plane-hierarchy.md): every
// domain of `tp` GPUs runs the flat protocol on a store of its own, in its slot ids; the lowest
// live slot of a domain's list leads it on the global store, where the leaders beat, watch each
// other and agree in domain ids (elastic/domain_leader.h joins the two levels). Every machine
// is the runtime's, the member's own sequence of them included (elastic/hierarchy_member.h);
// this file is their driver (the stores, the watches, a model of the formation) and the
// invariants.
#include <algorithm>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "comm/exit_notice.h"
#include "comm/gloo_communicator.h"
#include "comm/survivors.h"
#include "core/check.h"
#include "core/rng.h"
#include "elastic/address_relay.h"
#include "elastic/agreement.h"
#include "elastic/agreement_machine.h"
#include "elastic/domain_leader.h"
#include "elastic/hierarchy_member.h"
#include "elastic/sim/control_plane_sim.h"
#include "elastic/sim/sim_formation.h"
#include "elastic/sim/sim_run.h"
#include "elastic/sim/sim_watch.h"

namespace ntp::elastic::sim {
namespace {

const std::string kGlobal = "train/a0/g";
const std::string kFullPrefix = kGlobal + "/full/";  // full_list_key's, for any epoch
std::string domain_group(int d) { return "train/a0/d" + std::to_string(d); }

// Member lists written once per key, per store: the invariant's count.
class ListWrites {
 public:
  void watch(SimStore& store) {
    store.observe_writes([this](const std::string& key, const std::string& value) {
      if (key.ends_with("/list") && !decode_tombstone(value)) ++lists_[key];
      if (key.starts_with(kFullPrefix)) fulls_[key].insert(value);
    });
  }
  std::string check() const {
    for (const auto& [key, writes] : lists_) {
      if (writes > 1) return key + " was published " + std::to_string(writes) + " times";
    }
    for (const auto& [key, values] : fulls_) {
      if (values.size() > 1) return key + " was composed twice, differently";
    }
    return "ok";
  }

 private:
  std::map<std::string, int> lists_;
  std::map<std::string, std::set<std::string>> fulls_;
};

struct World {
  const SimConfig& config;
  int domain_size, domains;
  EventLoop loop;
  HostCpu host;
  SimStore global;
  std::vector<std::unique_ptr<SimStore>> domain_stores;
  std::vector<std::string> slot_incarnations, domain_incarnations;
  ListWrites writes;
  // One decoded copy of each full list for every member (the bytes are the same).
  std::map<std::string, std::shared_ptr<const MemberList>> decoded;
  // Counts the changes of any member's `formed` or `full`: the run's end is looked for again only
  // after one (a look scans every member, and the loop asks after every event).
  std::int64_t formation_changes = 0;
  // SimConfig::pause_leader_after's member (the leader of the domain after the first fault's),
  // or -1: armed to be paused from its construction, so that no reply of its escapes the pause.
  int paused_leader = -1;
  // Witnesses of two rare interleavings (SimResult's fields of these names).
  std::map<int, std::int64_t> awaits_dropped_after_relay;  // by domain
  std::int64_t takeovers_cut_by_death = 0;
  // The fault's detection: the first member's abort at or after the fault; and null, or what
  // runs then (SimConfig::second_kill_from_detection).
  std::optional<Time> detected;
  std::function<void()> on_detection;

  FormationWorld formation;

  // The step GPU `gid`'s state is at when a fault strikes: the job's step, or one past it for a
  // GPU whose update of the step went through before the fault (every update needs the world's
  // all-reduce, so the GPUs differ by at most one). Drawn once per GPU from the seed.
  std::int64_t committed(int gid) const {
    constexpr std::int64_t kJobStep = 1000;
    return kJobStep + static_cast<std::int64_t>(
                          splitmix64(config.seed ^ (static_cast<std::uint64_t>(gid) << 20)) & 1);
  }

  explicit World(const SimConfig& c)
      : config(c),
        domain_size(c.tp),
        domains(c.gpus / c.tp),
        host(loop, c.host_cores),
        global(loop, c.store),
        slot_incarnations(static_cast<size_t>(c.tp), comm::incarnation(0, 0)),
        domain_incarnations(static_cast<size_t>(c.gpus / c.tp), comm::incarnation(0, 0)),
        formation(loop, host) {
    formation.connect_per_link = c.connect_per_link;
    formation.dial_round_trip = c.dial_round_trip;
    formation.link_round_trip = c.link_round_trip;
    formation.woken_cpu = c.cpu_per_op + c.wake_cpu;  // as the flat simulator's
    formation.seed = c.seed;
    if (c.pause_leader_after >= Duration(0)) paused_leader = ((domains / 2 + 1) % domains) * c.tp;
    writes.watch(global);
    for (int d = 0; d < domains; ++d) {
      domain_stores.push_back(std::make_unique<SimStore>(loop, c.store));
      writes.watch(*domain_stores.back());
    }
  }
  StoreLink link(SimStore& store) {
    return StoreLink{&loop, &store, &host, config.cpu_per_op, nullptr, config.wake_cpu};
  }

  GroupShape shape() const { return GroupShape{domain_size, kFullMeshMaxSize}; }
  // The links the GPU at mesh rank `rank` sets up when it forms its groups on `full`
  // (elastic/address_relay.h's formation_links_of), in mesh ranks.
  // Its DP group is the list's groups' (built once per list: dp_group_ranks scans the list, and
  // at 102,384 GPUs once per member would be 10^10 steps).
  RankLinks links_of(const MemberList& full, int rank) {
    const int slot = full.members[static_cast<size_t>(rank)] % domain_size;
    return formation_links_of(full, rank, shape(), groups_of(full).dp(slot));
  }

 private:
  std::map<const MemberList*, ListGroups> groups_cache;

 public:
  // The groups a member forms on `full` (its decoded copy, shared by every member), built once.
  const ListGroups& groups_of(const MemberList& full) {
    auto it = groups_cache.find(&full);
    if (it == groups_cache.end())
      it = groups_cache.emplace(&full, ListGroups(full, domain_size)).first;
    return it->second;
  }
  std::chrono::milliseconds global_hang_detect() const {
    return config.global_hang_factor * config.hang_detect;
  }
  FullListDecoder decoder() {
    return [this](const std::string& text) -> Result<std::shared_ptr<const MemberList>> {
      auto it = decoded.find(text);
      if (it != decoded.end()) return it->second;
      Result<std::shared_ptr<const MemberList>> list = plain_decoder()(text);
      if (list.ok()) decoded.emplace(text, *list);
      return list;
    };
  }
};

// One GPU of the simulated job: the runtime's HierarchyMember (elastic/hierarchy_member.h) with
// this file as its driver: its two store links, its two watches (SimWatch: the domain's, and the
// leaders' while it leads), the formation's model, and the moments and witnesses the run reports.
class Member : public HierarchyDriver {
 public:
  Member(World& w, int gid)
      : w_(w),
        domain_(gid / w.domain_size),
        slot_(gid % w.domain_size),
        gid_(gid),
        dlink_(pausable(w.link(*w.domain_stores[static_cast<size_t>(gid / w.domain_size)]))),
        glink_(pausable(w.link(w.global))),
        machine_(params(), *this),
        formation_(w.formation, gid, dlink_, machine_.live()),
        watch_(dlink_, domain_group(domain_), slot_, w.config.hang_detect, &progress_,
               machine_.live(), [this](const std::string& reason) { on_domain_fire(reason); }) {
    watch_.on_fenced([this] { leave(); });
    if (gid == w.paused_leader) pause_.arm();
  }

  void start(Duration beat_offset) {
    beat_offset_ = beat_offset;
    watch_.start_beats(beat_offset, gid_);
    machine_.start();
  }
  void stop(bool post_exit);
  // SIGSTOP and SIGCONT of the process (ProcessPause; World::paused_leader only).
  void pause() { pause_.pause(); }
  // What it is doing now, as SimResult::paused_in names it.
  std::string doing() const { return machine_.doing(); }
  void resume() { pause_.resume(); }
  bool fenced() const { return watch_.fenced() || (global_watch_ && global_watch_->fenced()); }
  const std::shared_ptr<const MemberList>& full() const { return machine_.full(); }
  std::string failure() const { return error.empty() ? machine_.error() : error; }
  SimFormation& formation() { return formation_; }

  std::optional<Time> aborted, agreed, formed;
  // The full lists it formed its groups on (the trainer's state moved into that job: it is the
  // member's current one), and those it trained on (took its first step), since the job's
  // start (epoch 0's, implied, in neither).
  std::vector<std::shared_ptr<const MemberList>> formed_on, trained_on;
  // Its last domain list agreed, and as a leader its last full list relayed (the agreement's
  // parts: SimResult::agree_domain_s).
  std::optional<Time> domain_agreed, relayed_at;
  bool fired_early = false;
  bool left = false;  // it read that it was declared dead, and left the job
  std::string error;  // what fired its watch before the fault
  Time fault_at = Time::max();

  // HierarchyDriver.
  void run(StoreLevel level, IoSlot& io, Task<Status> task, std::shared_ptr<bool> live) override {
    drive(level == StoreLevel::kDomain ? dlink_ : glink_, io, std::move(task), std::move(live),
          [](Status) {});
  }
  void defer(std::function<void()> fn) override { dlink_.after(Duration(0), std::move(fn)); }
  void arm_watch(StoreLevel level, const MemberList& list) override {
    if (level == StoreLevel::kDomain) {
      if (list.epoch > 0) domain_agreed = w_.loop.now();  // armed on its new list
      watch_.arm(list.epoch, list.members, w_.slot_incarnations);
    } else {
      global_watch_->arm(list.epoch, list.members, w_.domain_incarnations);
    }
  }
  void disarm_watch(StoreLevel level) override {
    (level == StoreLevel::kDomain ? watch_ : *global_watch_).disarm();
  }
  void lead(const MemberList& global, bool takeover) override;
  void reforming() override;
  void got_full(std::shared_ptr<const MemberList> full, std::shared_ptr<bool> live) override;
  void relayed(std::shared_ptr<const MemberList>, std::shared_ptr<bool>) override {
    relayed_at = w_.loop.now();
  }
  void training() override {
    formed = w_.loop.now();
    ++w_.formation_changes;
    trained_on.push_back(machine_.full());
  }
  // Declared dead (a watcher recorded it silent, or a list was published without it): the
  // runtime's member leaves the job, and its launcher posts its exit.
  void leave() override {
    if (left) return;
    left = true;
    ++w_.formation_changes;  // the run's end is looked for again: one member fewer to wait for
    stop(true);
  }

 private:
  HierarchyMemberParams params() {
    HierarchyMemberParams p;
    p.global_group = kGlobal;
    p.domain_group = domain_group(domain_);
    p.domain = domain_;
    p.slot = slot_;
    p.domain_size = w_.domain_size;
    p.domain_count = w_.domains;
    p.hang_detect = w_.config.hang_detect;
    p.global_hang_detect = w_.global_hang_detect();
    p.progress = &progress_;
    p.decode = w_.decoder();
    p.encode_layout = [] { return std::string("sim layout"); };
    p.announce = [this] { return Announcement{w_.committed(domain_ * w_.domain_size + slot_), 0}; };
    if (w_.config.form) {  // its leader relays the addresses of links across domains
      p.mesh_prefix = [](const MemberList& full) { return mesh_prefix(full.epoch); };
      p.shape = w_.shape();
    }
    return p;
  }
  void note_fire(const std::string& reason) {
    if (w_.loop.now() >= fault_at || fired_early) return;
    fired_early = true;
    error = "fired at " + std::to_string(seconds(w_.loop.now() - Time{})) + " s: " + reason;
  }
  void on_domain_fire(const std::string& reason);
  void on_global_fire(const std::string& reason) {
    note_fire(reason);
    machine_.global_failed();
  }
  void form(std::shared_ptr<const MemberList> full, std::shared_ptr<bool> live);
  // The world communicator's prefix on `full`'s epoch (comm::GlooOptions::prefix): the same in
  // every domain's store, as the relay needs.
  static std::string mesh_prefix(int epoch) { return "train/w" + std::to_string(epoch); }
  StoreLink pausable(StoreLink link) {
    link.pause = &pause_;
    return link;
  }

  World& w_;
  int domain_, slot_, gid_;
  ProcessPause pause_;  // before the links, which point at it
  StoreLink dlink_, glink_;
  Progress progress_;
  HierarchyMember machine_;
  SimFormation formation_;
  SimWatch watch_;
  std::unique_ptr<SimWatch> global_watch_;  // while it leads
  Duration beat_offset_{0};                 // its beats' phase at the job's start
};

void Member::stop(bool post_exit) {
  if (machine_.taking_over()) ++w_.takeovers_cut_by_death;
  machine_.stop();
  if (!post_exit) return;
  // The domain's launcher reaps the process and posts its exit notice (comm/exit_notice.h).
  const std::string who = w_.slot_incarnations[static_cast<size_t>(slot_)];
  dlink_.send(io::set(comm::exit_notice_key(slot_), who), nullptr);
  dlink_.send(io::Append{comm::kLaunchEvents, "exit " + std::to_string(slot_) + " " + who},
              nullptr);
}

void Member::lead(const MemberList& global, bool takeover) {
  global_watch_ = std::make_unique<SimWatch>(
      glink_, kGlobal, domain_, w_.global_hang_detect(), &progress_, machine_.live(),
      [this](const std::string& reason) { on_global_fire(reason); });
  global_watch_->on_fenced([this] { leave(); });
  global_watch_->arm(global.epoch, global.members, w_.domain_incarnations);
  global_watch_->start_beats(takeover ? Duration(0) : beat_offset_, gid_);
}

void Member::on_domain_fire(const std::string& reason) {
  note_fire(reason);
  if (!aborted) aborted = w_.loop.now();
  if (w_.loop.now() >= fault_at && !w_.detected) {
    w_.detected = w_.loop.now();
    if (w_.on_detection) w_.on_detection();
  }
  machine_.domain_failed();
}

void Member::reforming() {
  if (machine_.awaiting_full() &&
      w_.domain_stores[static_cast<size_t>(domain_)]->value(
          relayed_full_key(domain_group(domain_), machine_.domain_list().epoch)) != nullptr) {
    ++w_.awaits_dropped_after_relay[domain_];  // its list was there, unread
  }
  agreed.reset();  // the figures run to the last re-formation
  formed.reset();
  ++w_.formation_changes;
}

void Member::got_full(std::shared_ptr<const MemberList> full, std::shared_ptr<bool> live) {
  ++w_.formation_changes;
  agreed = w_.loop.now();
  if (w_.config.form) {
    form(std::move(full), std::move(live));
  } else {
    machine_.resume_training();
  }
}

// The groups' formation (sim/sim_formation.h), as the flat simulator's except where the
// addresses go: a GPU publishes and reads all of them on its domain's store, under comm's keys.
// Those of its links to other domains travel between the two domains' leaders, one batch per
// pair of domains (the machine's relay, elastic/address_relay.h). Past its groups' barriers the
// machine marks its domain epoch done and trains.
void Member::form(std::shared_ptr<const MemberList> full, std::shared_ptr<bool> live) {
  const MemberList& m = *full;
  const int rank = static_cast<int>(std::lower_bound(m.members.begin(), m.members.end(), gid_) -
                                    m.members.begin());
  const RankLinks links = w_.links_of(m, rank);
  std::set<int> peers = links.local;
  peers.insert(links.across.begin(), links.across.end());
  std::vector<FormedGroup> groups = w_.groups_of(m).of(gid_);
  formation_.form(full, std::move(groups), peers, mesh_prefix(m.epoch), std::move(live),
                  [this, full] {
                    formed_on.push_back(full);
                    machine_.groups_formed();
                  });
}

// SimResult's parts of the agreement (agree_domain_s, ...), when they follow in their order.
void set_agree_parts(SimResult& out, const std::vector<std::unique_ptr<Member>>& members,
                     const std::set<int>& out_of_job) {
  const std::optional<Time> aborted = last_of(members, out_of_job, &Member::aborted),
                            domain = last_of(members, out_of_job, &Member::domain_agreed),
                            agreed = last_of(members, out_of_job, &Member::agreed);
  std::optional<Time> relayed;
  for (size_t i = 0; i < members.size(); ++i) {
    const std::optional<Time>& t = members[i]->relayed_at;
    if (out_of_job.count(static_cast<int>(i)) == 0 && t && (!relayed || *t > *relayed)) {
      relayed = t;
    }
  }
  if (!aborted || !domain || !relayed || !agreed) return;
  if (!(*aborted <= *domain && *domain <= *relayed && *relayed <= *agreed)) return;
  out.agree_domain_s = seconds(*domain - *aborted);
  out.agree_round_s = seconds(*relayed - *domain);
  out.agree_relay_take_s = seconds(*agreed - *relayed);
}

// The invariants of one run; "ok" or the first violation.
std::string check_base(const std::vector<std::unique_ptr<Member>>& members, const MemberList& last);

// The step of the last full list, against the trainer's rule (elastic::plan_reform): the least
// committed step of its holders, each of which is at it or one past it (the flat list's rule, one
// level up: domains' least steps, then the least of the domains').
std::string check_step(const World& w, const MemberList& last) {
  if (last.holders.empty()) return "";
  std::int64_t least = w.committed(last.holders.front());
  for (int h : last.holders) least = std::min(least, w.committed(h));
  if (last.step != least) {
    return "epoch " + std::to_string(last.epoch) + " agreed on step " + std::to_string(last.step) +
           " but its holders' least committed step is " + std::to_string(least);
  }
  return "";
}

std::string check(const World& w, const std::vector<std::unique_ptr<Member>>& members,
                  const std::set<int>& victims) {
  const MemberList* first = nullptr;
  for (size_t i = 0; i < members.size(); ++i) {
    if (victims.count(static_cast<int>(i)) > 0) continue;
    const Member& m = *members[i];
    const std::string who = "member " + std::to_string(i);
    if (std::string fault = survivor_fault(m, who); !fault.empty()) return fault;
    if (!m.full()) return who + " received no full list";
    if (!m.formed) return who + " did not form its groups";
    if (first == nullptr) first = m.full().get();
    if (m.full()->epoch != first->epoch || m.full()->members != first->members) {
      return who + " holds another full list than member " + std::to_string(first->members[0]);
    }
  }
  if (first == nullptr) return "no survivor";
  for (int victim : victims) {
    if (first->has(victim)) return "victim " + std::to_string(victim) + " is in the full list";
  }
  if (first->members.size() + victims.size() != members.size()) {
    return "a survivor is missing from the list";
  }
  if (std::string base = check_base(members, *first); !base.empty()) return base;
  if (std::string step = check_step(w, *first); !step.empty()) return step;
  return w.writes.check();
}

// The base of the last full list `last`, against the trainer's rules:
//   - no update lost: an epoch on which every GPU of its list trained may have had steps (the
//     first step needs every GPU), so `last`'s base is no older than any such epoch;
//   - a re-formation's source (elastic::plan_reform): each holder of `last` holds its base
//     epoch's state, as the job it formed before `last` (its state moved in) or as the base it
//     kept from that job's re-formation (the earlier list's base).
std::string check_base(const std::vector<std::unique_ptr<Member>>& members,
                       const MemberList& last) {
  std::map<int, std::pair<const MemberList*, std::set<int>>> trained_by;  // by epoch
  for (size_t i = 0; i < members.size(); ++i) {
    for (const auto& list : members[i]->trained_on) {
      auto& [epoch_list, who] = trained_by[list->epoch];
      epoch_list = list.get();
      who.insert(static_cast<int>(i));
    }
  }
  for (const auto& [epoch, trained] : trained_by) {
    const auto& [epoch_list, who] = trained;
    const bool everyone = std::all_of(epoch_list->members.begin(), epoch_list->members.end(),
                                      [&who](int id) { return who.count(id) > 0; });
    if (epoch < last.epoch && everyone && last.base_epoch < epoch) {
      return "every GPU trained on epoch " + std::to_string(epoch) + " but epoch " +
             std::to_string(last.epoch) + " re-forms from base epoch " +
             std::to_string(last.base_epoch);
    }
  }
  for (int h : last.holders) {
    const std::vector<std::shared_ptr<const MemberList>>& formed =
        members[static_cast<size_t>(h)]->formed_on;
    int current = 0, kept = 0;  // epoch 0's job, built from drawn state
    for (const auto& list : formed) {
      if (list->epoch >= last.epoch) break;
      current = list->epoch;
      kept = list->base_epoch;
    }
    if (last.base_epoch != current && last.base_epoch != kept) {
      return "member " + std::to_string(h) + " is a holder of base epoch " +
             std::to_string(last.base_epoch) + " in epoch " + std::to_string(last.epoch) +
             " but holds epochs " + std::to_string(current) + " and " + std::to_string(kept);
    }
  }
  return "";
}

}  // namespace

SimResult simulate_hierarchy(const SimConfig& c) {
  NTP_CHECK_MSG(c.steady >= std::chrono::milliseconds(2500), "steady: at least 2.5 s");
  NTP_CHECK_MSG(c.tp >= 2 && c.gpus % c.tp == 0 && c.gpus / c.tp >= 2,
                "the hierarchy needs whole domains of at least 2 GPUs, and 2 domains");
  World w(c);
  SimResult out;
  const SteadyWindow window = steady_window(c);
  const Time fault_at = window.fault_at;
  const double steady_s = window.seconds;
  const std::vector<std::unique_ptr<Member>> members = start_members<Member>(w, c, window, out);
  for (const auto& m : members) w.formation.members.push_back(&m->formation());
  auto ops = [&w] {
    std::vector<std::int64_t> counts{w.global.counts().ops};
    for (const auto& s : w.domain_stores) counts.push_back(s->counts().ops);
    return counts;
  };
  const std::vector<std::int64_t> ops_before = ops();
  const std::map<std::string, std::int64_t> kinds_before = w.global.counts().by_kind;
  const bool on_leader = c.fault == Fault::kLeaderKill || c.fault == Fault::kLeaderHang ||
                         c.fault == Fault::kDomainLoss;
  const int victim = (w.domains / 2) * c.tp + (on_leader ? 0 : c.tp / 2);
  out.victim = victim;
  std::set<int> victims{victim};
  std::vector<int> stopped_at_fault{victim};  // the victim, or its whole domain
  if (c.fault == Fault::kDomainLoss) {
    NTP_CHECK_MSG(!c.second_in_same_domain, "a domain lost whole has no one left to kill");
    for (int slot = 1; slot < c.tp; ++slot) stopped_at_fault.push_back(victim + slot);
    victims.insert(stopped_at_fault.begin(), stopped_at_fault.end());
  }
  const bool second = c.second_kill_after >= Duration(0);
  bool second_killed = false;
  if (second) {
    const int domain = c.second_in_same_domain ? w.domains / 2 : (w.domains / 2 + 1) % w.domains;
    // After a leader's fault, the second kill in its domain strikes the slot taking over.
    const int slot = on_leader && c.second_in_same_domain ? 1 : c.tp / 2 + 1;
    out.second_victim = domain * c.tp + slot;
    NTP_CHECK_MSG(out.second_victim != victim && c.tp >= 3, "the second victim needs --tp >= 3");
    victims.insert(out.second_victim);
    auto kill_second = [&w, &members, &out, &second_killed, fault_at] {
      Member& victim2 = *members[static_cast<size_t>(out.second_victim)];
      out.second_killed_in = victim2.doing();
      out.second_killed_at_s = seconds(w.loop.now() - fault_at);
      victim2.stop(true);
      second_killed = true;
    };
    if (c.second_kill_from_detection) {
      w.on_detection = [&w, &c, kill_second] { w.loop.after(c.second_kill_after, kill_second); };
    } else {
      w.loop.at(fault_at + c.second_kill_after, kill_second);
    }
  }
  const bool pausing = c.pause_leader_after >= Duration(0);
  const Time wake_at = fault_at + c.pause_leader_after + c.pause_for;
  if (pausing) {
    out.paused_leader = w.paused_leader;
    NTP_CHECK_MSG(victims.count(out.paused_leader) == 0 && c.pause_for > Duration(0),
                  "the paused leader must be another member than the killed ones, paused a while");
    Member& paused = *members[static_cast<size_t>(out.paused_leader)];
    w.loop.at(fault_at + c.pause_leader_after, [&paused, &out] {
      out.paused_in = paused.doing();
      paused.pause();
    });
    w.loop.at(wake_at, [&paused] { paused.resume(); });
  }
  // Left out of the end's checks: the killed members, and the paused one once it left.
  auto excluded = [&] {
    std::set<int> out_of_job = victims;
    if (pausing && members[static_cast<size_t>(out.paused_leader)]->left) {
      out_of_job.insert(out.paused_leader);
    }
    return out_of_job;
  };
  for (auto& m : members) m->fault_at = fault_at;
  std::int64_t global_ops_at_fault = 0;
  w.loop.at(fault_at, [&] {
    const std::vector<std::int64_t> now = ops();
    out.steady_store_ops_per_s = static_cast<double>(now[0] - ops_before[0]) / steady_s;
    for (size_t s = 1; s < now.size(); ++s) {
      out.domain_steady_store_ops_per_s =
          std::max(out.domain_steady_store_ops_per_s,
                   static_cast<double>(now[s] - ops_before[s]) / steady_s);
    }
    out.steady_ops_by_kind = kinds_since(kinds_before, w.global.counts().by_kind);  // in 2 s
    global_ops_at_fault = now[0];
    w.global.set_service_rate(c.store.ops_per_s / c.slow_store_factor);
    if (c.fault == Fault::kDomainLoss) {  // the rack's launcher too: no exit notice
      for (int v : stopped_at_fault) members[static_cast<size_t>(v)]->stop(false);
    } else {
      members[static_cast<size_t>(victim)]->stop(c.fault == Fault::kKill ||
                                                 c.fault == Fault::kLeaderKill);
    }
  });
  Time last_fault = fault_at;
  if (pausing) last_fault = std::max(last_fault, wake_at + 2 * w.global_hang_detect());
  // Done when every survivor formed its groups with a full list that none of the victims is in.
  std::int64_t looked_at_changes = -1;
  auto recovered = [&] {
    if (w.loop.now() <= last_fault || (second && !second_killed)) return false;
    if (w.formation_changes == looked_at_changes) return false;  // nothing new since the last look
    looked_at_changes = w.formation_changes;
    const std::set<int> out_of_job = excluded();
    if (!last_of(members, out_of_job, &Member::formed)) return false;
    for (size_t i = 0; i < members.size(); ++i) {
      const Member& m = *members[i];
      if (out_of_job.count(static_cast<int>(i)) > 0) continue;
      for (int v : out_of_job) {
        if (m.full()->has(v)) return false;
      }
    }
    return true;
  };
  out.events += w.loop.run_until(fault_at + c.limit, recovered);
  out.recovery_store_ops = w.global.counts().ops - global_ops_at_fault;
  out.peak_store_queue = w.global.counts().peak_queue;
  for (const auto& s : w.domain_stores) {
    out.peak_domain_store_queue = std::max(out.peak_domain_store_queue, s->counts().peak_queue);
  }
  const std::set<int> out_of_job = excluded();
  out.paused_leader_left = pausing && out_of_job.count(out.paused_leader) > 0;
  for (const auto& [domain, dropped] : w.awaits_dropped_after_relay) {
    const bool struck = domain == out.victim / c.tp ||
                        (out.second_victim >= 0 && domain == out.second_victim / c.tp);
    if (!struck) out.awaits_dropped_after_relay += dropped;
  }
  out.takeovers_cut_by_death = w.takeovers_cut_by_death;
  if (w.detected) out.detected_at_s = seconds(*w.detected - fault_at);
  set_phases(out, members, out_of_job, fault_at);
  set_agree_parts(out, members, out_of_job);
  for (size_t i = 0; i < members.size(); ++i) {
    if (out_of_job.count(static_cast<int>(i)) == 0 && members[i]->full()) {
      out.agreed_epoch = members[i]->full()->epoch;
      out.base_epoch = members[i]->full()->base_epoch;
      break;
    }
  }
  out.invariants = check(w, members, out_of_job);
  return out;
}

}  // namespace ntp::elastic::sim
