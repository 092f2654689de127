// A member's side of the domain hierarchy (docs/design/control-plane-hierarchy.md) as a machine
// that both drivers run: when the member re-forms its domain, when it leads its domain (the lowest
// live slot of the domain's list) or takes the lead over, how it drops a leader's round that a
// second fault overtook, and its wait for the relayed full list. The steps it sequences are the
// machines of elastic/agreement_machine.h and elastic/domain_leader.h; this class holds the
// member's state between them and reacts to what its watches and its driver tell it.
//
// What it needs of the world goes through a HierarchyDriver: running a task on one of the two
// stores (the domain's, the global one), its two failure watches, and the group formation, which
// is the trainer's in the runtime and a model in the simulator (elastic/sim/hierarchy_sim.cpp).
// Every entry point runs on the member's one thread of control (the simulator's agenda, or the
// runtime's event thread): none is called from inside another.
//
// One member's recovery, as the calls go:
//   its domain watch fires        domain_failed(): the domain epoch's failure is posted, the
//                                 domain agrees its next list (a member declared dead leaves);
//   the new list's first slot     leads: a global round for the domain's list (a takeover first
//                                 reads the global list its domain stood for and gives up the
//                                 epochs its predecessor may have died in), then relays the full
//                                 list into the domain;
//   every member                  awaits the full list agreed for its domain epoch, has its
//                                 driver form the groups on it (got_full), and once they are up
//                                 (groups_formed) marks the domain epoch done and trains; the
//                                 leader first waits for its whole domain to be done and marks
//                                 the global epoch done for it (the next full list's base).
// A second fault during any of it starts the domain's re-formation again; the round in flight is
// dropped, and the next round fails the global epoch that round had entered.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/non_copyable.h"
#include "core/status.h"
#include "elastic/address_relay.h"
#include "elastic/agreement_machine.h"
#include "elastic/domain_leader.h"
#include "elastic/member_list.h"
#include "elastic/progress.h"
#include "elastic/task.h"

namespace ntp::elastic {

// Which of a member's two stores an op goes to.
enum class StoreLevel { kDomain, kGlobal };

// What a HierarchyMember asks of whoever runs it.
class HierarchyDriver {
 public:
  virtual ~HierarchyDriver() = default;

  // Runs `task` (its awaits through `io`, which outlives it) on the store of `level`, to its end
  // or until `*live` turns false (the member died, or dropped the task): its replies then go
  // nowhere. The task hands its result on itself.
  virtual void run(StoreLevel level, IoSlot& io, Task<Status> task, std::shared_ptr<bool> live) = 0;
  // Runs `fn` as the member after what runs now (a watch's verdict must not re-enter the member).
  virtual void defer(std::function<void()> fn) = 0;

  // The member's failure watch at `level` (the domain's: slots; the leaders': domains) watches
  // `list`'s members in its epoch, or nothing until armed again.
  virtual void arm_watch(StoreLevel level, const MemberList& list) = 0;
  virtual void disarm_watch(StoreLevel level) = 0;
  // The member leads its domain from now: its leaders' watch beats for the domain and watches
  // `global` (at the job's start, or `takeover`: its leader died and it is the next slot).
  virtual void lead(const MemberList& global, bool takeover) = 0;

  // A domain re-formation starts: the groups and any full list it held or awaited are stale.
  virtual void reforming() = 0;
  // The member is about to announce itself in its domain's agreement: `go` once its owner is
  // ready to re-form, as the member, unless `*live` turned false first. In the flat protocol the
  // training thread announces itself, so a stuck one never does and the decider finds it still;
  // a runtime that announces for a training thread waits for that thread to leave its job (and
  // fences the member if it was recorded silent meanwhile). Default: at once (the simulator's
  // members have no training thread).
  virtual void when_ready(std::shared_ptr<bool> /*live*/, std::function<void()> go) { go(); }
  // The full list agreed for the member's domain epoch: the driver forms the groups on it while
  // `*live` (false once the domain re-forms again, or the member dies) and calls groups_formed()
  // (or resume_training() where the formation is not modelled).
  virtual void got_full(std::shared_ptr<const MemberList> full, std::shared_ptr<bool> live) = 0;
  // As the leader, it relayed `full` into its domain: the leader's part of the formation (the
  // addresses of the links across domains), while `*live`.
  virtual void relayed(std::shared_ptr<const MemberList> full, std::shared_ptr<bool> live) = 0;
  // The member trains again, in its step's collectives.
  virtual void training() = 0;
  // It was declared dead (it read so, or a list was agreed without it): it leaves the job; its
  // driver calls stop() and its launcher posts its exit.
  virtual void leave() = 0;
};

struct HierarchyMemberParams {
  std::string global_group;  // the leaders' namespace on the global store
  std::string domain_group;  // its domain's namespace on the domain's store
  int domain = 0, slot = 0;  // its global id is domain * domain_size + slot
  int domain_size = 0, domain_count = 0;
  std::chrono::milliseconds hang_detect{1000};         // the domain's watch and agreement
  std::chrono::milliseconds global_hang_detect{3000};  // the leaders'
  Progress* progress = nullptr;                        // marked at every wait; must outlive it
  FullListDecoder decode = plain_decoder();
  std::function<std::string()> encode_layout;  // the layout a leader announces
  // What the member announces in its domain's agreement: the step its held state is at and its
  // incarnation (the trainer's; null: {0, 0}). A domain list's step is the least of its holders'
  // (elastic::decide), a leader announces its domain list's step in the global round, and the
  // full list's step is the global one's: the least committed step of every holder, as the flat
  // protocol's list has it (plan_reform takes a member one step ahead back).
  std::function<Announcement()> announce;
  // Where the groups' formation on `full` publishes its links' addresses: the prefix of its
  // address keys on the domain's store (comm::GlooOptions::prefix), and the groups' shape. Set,
  // a leader relays the addresses of links across domains (elastic/address_relay.h) for each
  // full list it relays; null, none (a formation over a store every member shares needs none).
  std::function<std::string(const MemberList& full)> mesh_prefix;
  GroupShape shape;
  std::chrono::milliseconds relay_timeout{30000};  // comm::GlooOptions::timeout's default
};

class HierarchyMember : NonCopyable {
 public:
  // `driver` must outlive the member.
  HierarchyMember(HierarchyMemberParams params, HierarchyDriver& driver);
  ~HierarchyMember();

  // The job's start: every domain's list and the global list are epoch 0's, whole; slot 0 leads.
  void start();
  // Its domain watch took the domain's epoch as failed: the domain re-forms (deferred).
  void domain_failed();
  // Its leaders' watch took the global epoch as failed (another domain changed): its domain
  // re-forms too, for its groups span domains; once per armed global epoch.
  void global_failed();
  // The driver formed the groups on full(): the domain epoch is marked done, then it trains (a
  // leader once its whole domain is done and it marked the global epoch done for it).
  void groups_formed();
  // It trains again on full() (no done key: the driver does not model the formation).
  void resume_training();
  // Its groups on the domain epoch failed (a peer gone, seen by a collective or the formation
  // before any watch): posts the epoch's failure on the domain's store, where every member's
  // domain watch reads it, its own too, which re-forms the domain. Once per domain epoch; nothing
  // while its domain agrees (the epoch is failed already).
  void report_failure();
  // The member is dead (killed, or it left): its tasks are dropped.
  void stop();

  bool leads() const { return lead_ != nullptr; }
  // The last full list it got (null: none since the job's start).
  const std::shared_ptr<const MemberList>& full() const { return full_; }
  const MemberList& domain_list() const { return domain_list_; }
  bool awaiting_full() const { return awaiting_full_; }
  // It is taking its domain's lead over and has not relayed a full list yet.
  bool taking_over() const;
  // What it is doing now: "domain agreement", "leaders' round", "awaiting the full list",
  // "forming" or "steady" (comma-separated when several).
  std::string doing() const;
  // The first error of any of its steps ("": none).
  const std::string& error() const { return error_; }
  // False once it is dead; its watches hold it too.
  const std::shared_ptr<bool>& live() const { return running_; }

 private:
  struct Leadership;
  struct Round;
  struct AddressRelay;

  AgreementParams params_at(StoreLevel level) const;
  void lead(MemberList global, bool takeover);
  void reform_domain();
  void agree_domain();
  void lead_round();
  void take_over(std::shared_ptr<Round> round);
  void run_round(std::shared_ptr<Round> round, int fail_in_flight);
  void relay(std::shared_ptr<Round> round, FullList composed);
  // The leader's relay of its members' link addresses across domains for `full`: three steps, on
  // the domain's store, the global one, the domain's again; each step's task holds the relay
  // (whose slots its awaits go through) and starts the next, and the erase of the keys it read.
  void relay_addresses(std::shared_ptr<Round> round, std::shared_ptr<const MemberList> full);
  Task<Status> collect_outgoing(std::shared_ptr<AddressRelay> relay);
  Task<Status> trade(std::shared_ptr<AddressRelay> relay, std::vector<std::string> addresses);
  Task<Status> put(std::shared_ptr<AddressRelay> relay,
                   std::vector<std::pair<std::string, std::string>> entries);
  Task<Status> erasing(std::shared_ptr<AddressRelay> relay, IoSlot& io,
                       std::vector<std::string> keys);
  void relay_failed(const Status& s);
  void await_full();
  void mark_global_done();
  void fail(const Status& s);
  // The training thread in its step's collectives (waiting on its peers, not stuck), or not.
  void in_collectives(bool in);
  // Runs `task` on `level` with `live`; `done` takes its result as it ends (not once `*live`
  // turned false).
  template <typename T, typename Done>
  void run(StoreLevel level, IoSlot& io, std::shared_ptr<bool> live, Task<T> task, Done done);

  HierarchyMemberParams p_;
  HierarchyDriver& driver_;
  bool in_collectives_ = false;
  std::shared_ptr<bool> running_ = std::make_shared<bool>(true);
  // The agreement, and its mark_done on a slot of its own: a re-formation may start while the
  // last one's done key is on its way.
  IoSlot agree_io_, done_io_, relay_io_, global_done_io_;
  AgreementMachine agreement_, done_agreement_;
  MemberList domain_list_;
  std::shared_ptr<const MemberList> full_;
  std::unique_ptr<Leadership> lead_;
  std::shared_ptr<Round> round_;  // the last round started; dropped when dead or replaced
  std::shared_ptr<bool> await_live_ = std::make_shared<bool>(false);
  // The domain agreement's wait for its owner (when_ready): false once superseded or dead.
  std::shared_ptr<bool> ready_live_ = std::make_shared<bool>(false);
  std::shared_ptr<IoSlot> await_io_;
  bool awaiting_full_ = false;  // an await_full under way
  bool agreeing_ = false;       // a domain agreement under way
  bool trained_ = false;        // it trains on full_: resume_training ran since it re-formed
  int reported_epoch_ = -1;     // the domain epoch whose failure report_failure posted
  std::shared_ptr<IoSlot> report_io_;
  std::string error_;
};

}  // namespace ntp::elastic
