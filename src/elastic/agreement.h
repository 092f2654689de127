// The agreement of a re-formation, run against the store: a member enters the epoch that
// next_target names, announces itself, and either decides (its claim of the epoch's decider key
// was the first) or waits for the decider's list. The rules are member_list.h's, the sequence of
// operations and the bounds are the machine's (elastic/agreement_machine.h); this file names the
// store's keys and drives the machine with a real store and the wall clock
// (elastic/store_driver.h).
//
// Keys and streams (under the job's group "train/a<attempt>"):
//   <group>/e<T>/alive       the announcements, an event stream ("<id> <announcement>")
//   <group>/e<T>/decider     the decider's id, claimed (comm::Store::claim: the first claim
//                            holds it, and names its holder in the same operation)
//   <group>/e<T>/list        the member list, once   <group>/e<T>/done/<id> its reshard is done
//   <group>/fail/<T>         T failed (a retry follows)
//   <group>/events           the job's events: "list <T>", "fail <T>", "join <id>" (job_events)
//   <group>/silent/<id>      a watcher found id's progress still at this heartbeat value
//   <group>/collected        the epochs below it are collected
// Collection. Once a list L is published, every epoch below it failed or was listed, and a
// member's walk (next_target) needs of such an epoch only where to go on: so the decider of L,
// once its own re-formation is done, collects the epochs below L (best effort). It erases their
// done keys, announcement streams and decider keys, and replaces each list with a
// tombstone naming L ("superseded L"), which the walk follows to L: a member away since any of
// them is fenced (or parked) by L's list, as it was by the lists in between. Fail keys stay (a
// counter each): a decider of a failed epoch that wakes and publishes late leaves a list that
// walks still pass as failed. Those late deciders and waiters are the only other readers of a
// collected epoch: a waiter that finds the tombstone gives the epoch up, a decider's look finds
// the fail key. What an epoch leaves is two small keys, whatever the job's size.
// Store load: nothing polls fast. The decider reads the announcements as they arrive (a blocking
// stream read), and the candidates that have not announced, with the epoch's failure key, in one
// get_many every 100 ms. A waiter blocks on the job's events, and every 250 ms reads the list,
// the failure key and the decider's liveness in one get_many. So an agreement costs each member a
// handful of operations, and the decider O(1) operations per 100 ms (of O(N) keys at most).
// Bounds: the decider waits for a candidate until it announces, its launcher reports it gone,
// or its progress has stood still for its phase's allowance (elastic/progress.h); at most
// `window`. A member waiting for the list gives up on the epoch (posts its failure notice and
// goes on to the next) when the decider is gone in the same sense, or after window + 2 s.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "comm/store.h"
#include "core/non_copyable.h"
#include "core/status.h"
#include "elastic/agreement_machine.h"
#include "elastic/member_list.h"
#include "elastic/progress.h"
#include "elastic/store_driver.h"

namespace ntp::elastic {

// The machine's parameters (elastic/agreement_machine.h) and the store it runs against.
struct AgreementConfig : AgreementParams {
  std::shared_ptr<comm::Store> store;
};

std::string fail_key(const std::string& group, int epoch);
// The job's event stream (comm/stream.h): "fail <T>" when epoch T failed, "list <T>" when T's
// member list was published. Failure watches and the agreement's waiters block on it.
std::string job_events(const std::string& group);
// Epoch T failed, as a relayer posts it (post_failure, agreement_machine.h): its key, then (for
// the first poster only) the event; a reader woken by the event finds the key.
Status post_failure_notice(comm::Store& store, const std::string& group, int epoch);
// The epoch of a "fail <T>" event; nullopt for any other event.
std::optional<int> parse_failure_event(const std::string& event);
// `id` asks to join (train/admission.h: after its request key is written): "join <id>", which
// every failure watch counts, so the job's leader learns of it with no store I/O of its own.
Status post_join_notice(comm::Store& store, const std::string& group, int id);
bool is_join_event(const std::string& event);
std::string done_key(const std::string& group, int epoch, int id);
// Epoch `epoch`'s key `what` ("list", "alive" (its announcement stream), "decider").
std::string epoch_key(const std::string& group, int epoch, const std::string& what);
std::string silent_key(const std::string& group, int id);

// Removes `id`'s silent record (best effort: a store without erase gets an empty record, which
// matches no progress). A new process of the slot calls it before it joins.
void forget_silent_record(comm::Store& store, const std::string& group, int id);
// Whether a watcher recorded `id` still and its progress has not moved since.
bool still_silent(comm::Store& store, const std::string& group, int id);
// The same rule on values already read: `silent` (the record) and `beat` (its heartbeat now).
bool still_since_recorded(const std::optional<std::string>& silent,
                          const std::optional<std::string>& beat);

class Agreement : NonCopyable {
 public:
  explicit Agreement(AgreementConfig config);

  // After a failure (or to admit `joiners`): agrees on the next epoch's list. `last` is the
  // newest list this member received; it is replaced by newer published lists that name this
  // member (catching up) and finally by the agreed one. `mine` is what it announces; a joiner
  // (holds no state) never decides. `encode_layout` encodes the layout of `last` (the decider's
  // base when `last` is complete). kAborted: fenced (a list was published without it). A list
  // that parks this member (MemberList::parked) is returned without replacing `last`.
  // `dropping`: members the decider parks (DecisionInput::dropped).
  Result<MemberList> agree(MemberList& last, const Announcement& mine, bool joiner,
                           const std::vector<int>& joiners,
                           const std::function<std::string()>& encode_layout,
                           const std::vector<int>& dropping = {});

  // The agreed list's epoch is complete for this member: its state in the new layout is whole.
  // The list's decider then collects the keys of the epochs below it (see above).
  Status mark_done(const MemberList& list);
  // This member's operation of `epoch` failed: every member of it learns so (best effort).
  void report_failure(int epoch);
  // Connects the stream reader the agreement blocks on (the decider on the announcements, the
  // waiters on the job's events) ahead of a re-formation, which would otherwise open that
  // connection on its path: three round trips and the server's INFO per member, all members at
  // once (docs/perf.md, the agreement's parts). Best effort: an agreement whose reader is not
  // connected connects it. On the thread that runs agree().
  void prepare();

 private:
  std::shared_ptr<comm::Store> store_;  // kept alive for the driver
  StoreDriver driver_;  // its stream reader is opened at the first agreement, then kept
  IoSlot io_;
  AgreementMachine machine_;
};

}  // namespace ntp::elastic
