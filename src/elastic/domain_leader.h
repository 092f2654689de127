// The domain hierarchy's own steps (docs/design/control-plane-hierarchy.md) as machines
// (elastic/task.h): what a domain's leader does between its domain's agreement and the global
// one, and how every member learns the job-wide list. The agreement itself is
// AgreementMachine's, run twice: once in the domain's namespace (ids: slots of the domain),
// once in the global namespace by the leaders (ids: domains). These steps join the two:
//
//   leader     publish_domain: the domain's agreed list, under its domain epoch, where any
//              leader can read it; then the global agreement, announcing Announcement{the
//              domain list's step, the domain epoch}: the global list's restarts[d] names the
//              domain list each domain stands for.
//   composer   full_list: the full list of global epoch G (every GPU of the listed domains, in
//              global ids domain * domain_size + slot) is a function of the global list and the
//              domain lists it names. The global decider composes and publishes it; a leader
//              that does not see it within compose_wait composes it itself: the same bytes.
//   leader     relay_full: copies it into its domain's namespace under the domain epoch it was
//              agreed for (the global list's restarts[d]), and a "full <G>" event.
//   member     await_full: waits for the full list agreed for its domain's epoch, under that
//              epoch's key. An older one may be there too: the domain re-formed after it was
//              relayed (a second fault, or another domain's), and a member must not take it. One
//              key per domain epoch, not one overwritten key: a leader that was paused and woke
//              after its successor took over may still relay its old list, and over a single key
//              it would hide its successor's from members that had not read it yet
//              (models/hierarchy/hierarchy.pml, RELAY_ONE_KEY).
//
// Keys, besides AgreementMachine's in each namespace:
//   <global>/domain/<d>/<e>   domain d's list of its epoch e (written once, by its leader)
//   <global>/full/<G>         the full list of global epoch G
//   <domain>/full/<e>         the full list agreed for the domain's epoch e
#pragma once

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/non_copyable.h"
#include "core/status.h"
#include "elastic/agreement_machine.h"
#include "elastic/member_list.h"
#include "elastic/task.h"

namespace ntp::elastic {

std::string domain_list_key(const std::string& global_group, int domain, int domain_epoch);
std::string full_list_key(const std::string& global_group, int global_epoch);
std::string relayed_full_key(const std::string& domain_group, int domain_epoch);

// The full list of `global` from the domain lists it names (`domains[d]` for each d it lists, in
// the domain's slot ids) and the GPUs of its base epoch, `base_gpus` (the members of the full
// list of global.base_epoch). Members are global ids; the step, the base epoch and the decider
// (a domain) are the global list's; restarts[id] are the domains'. The base is the flat rule's
// one level up (docs/design/control-plane-hierarchy.md, "the steps left", 3): base_members are
// `base_gpus`, and the holders the members among them. A leader marks a global epoch done for
// its domain only once every GPU of its domain is done on it, and before its own first step on
// it (HierarchyMember::groups_formed), so a global epoch is complete, and the next list's base,
// only when every GPU of it formed its groups on it.
MemberList compose_full_list(const MemberList& global, const std::map<int, MemberList>& domains,
                             const std::vector<int>& base_gpus, int domain_size, int domain_count);
// The GPUs of every slot of every domain: the full list of global epoch 0 (the job's start).
std::vector<int> all_gpus(int domain_size, int domain_count);

// Polls `list`'s done keys in `group` (collect_keys, elastic/address_relay.h) until every member
// of it marked its epoch done (AgreementMachine::mark_done). A leader's wait for its domain
// before it marks the global epoch done for it.
Task<Status> await_done(IoSlot& io, std::string group, MemberList list);
// Marks global epoch `epoch` done for `domain` (the key the global decider's completeness reads).
Task<Status> mark_domain_done(IoSlot& global_io, std::string global_group, int epoch, int domain);

// Decodes a full list; the simulator shares one decoded copy among its members.
using FullListDecoder =
    std::function<Result<std::shared_ptr<const MemberList>>(const std::string& text)>;
FullListDecoder plain_decoder();

// A full list as published (what a leader relays) and decoded.
struct FullList {
  std::string text;
  std::shared_ptr<const MemberList> list;
};

struct DomainLeaderParams {
  std::string global_group;
  int domain = 0;  // this leader's domain: its id in the global agreement
  int domain_size = 0;
  int domain_count = 0;
  std::chrono::milliseconds compose_wait{1000};
  FullListDecoder decode = plain_decoder();
};

class DomainLeader : NonCopyable {
 public:
  // `global` is the global agreement's (group, me = the domain, bounds); `global_io` carries
  // every await on the global store and must outlive every task.
  DomainLeader(DomainLeaderParams params, AgreementParams global, IoSlot& global_io);

  // One round for the domain's agreed list `domain_list`: publish it, fail the global epoch
  // the leaders' watches are armed on (`global.epoch`, which tells the other leaders) and
  // `fail_in_flight` when later (the epoch a dropped round of this domain announced in, -1:
  // none), agree the next global list (`global` becomes it), and read or compose its full list.
  // A list agreed on an older list of this domain (a replaced leader's late announcement) is
  // failed, and the next one agreed.
  // nullopt: that global epoch failed before anyone composed its full list (a new round).
  Task<Result<std::optional<FullList>>> round(MemberList& global, MemberList domain_list,
                                              int fail_in_flight,
                                              std::function<std::string()> encode_layout);
  // The global epoch this leader last announced in (-1: none yet).
  int entered() const { return *entered_; }

  Task<Status> publish_domain(const MemberList& domain_list);
  // The full list of `global`, read or composed (see above); nullopt when global's epoch failed
  // before anyone composed it.
  Task<Result<std::optional<FullList>>> full_list(const MemberList& global);

 private:
  Task<Result<FullList>> compose(const MemberList& global);
  Result<FullList> decoded(std::string text) const;

  DomainLeaderParams p_;
  IoSlot& io_;
  std::shared_ptr<int> entered_ = std::make_shared<int>(-1);
  AgreementMachine agreement_;
};

// The global list of `epoch` (epoch 0: every domain), for a member that takes its domain's lead.
Task<Result<MemberList>> read_global_list(IoSlot& io, std::string global_group, int epoch,
                                          int domain_count);

// A new leader's takeover. Its predecessor may have died inside a global agreement (even as
// its decider), which no one would give up on, for the domain beats on under its new leader.
// So the first global epoch after `after_epoch` that is neither failed nor listed is failed,
// and so is every listed one on the way (its list names the domain as it was). And the failure
// of `after_epoch` itself (the epoch the leaders' watches are armed on) is announced again:
// the predecessor may have been its first poster and died between the count and the event
// (post_failure sends the event once), leaving the other leaders' watches uninformed.
Task<Status> fail_open_epochs(IoSlot& io, std::string global_group, int after_epoch);

// The leader's relay of `full` (of global epoch `global_epoch`, agreed for the domain's epoch
// `domain_epoch`) into its domain's namespace (`domain_io` on the domain's store).
Task<Status> relay_full(IoSlot& domain_io, std::string domain_group, std::string full_text,
                        int global_epoch, int domain_epoch);

// A member's wait for the full list agreed for its domain's epoch `domain_epoch`: blocking reads
// of the domain's events between looks.
Task<Result<std::shared_ptr<const MemberList>>> await_full(IoSlot& domain_io,
                                                           std::string domain_group,
                                                           int domain_epoch,
                                                           FullListDecoder decode);

}  // namespace ntp::elastic
