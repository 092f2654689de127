// The agreement of a re-formation, run against the store: a member enters the epoch that
// next_target names, announces itself, and either decides (it drew the epoch's first ticket)
// or waits for the decider's list. The rules are member_list.h's; this file adds only I/O and
// time: the store's keys, the polling, and the bounds.
//
// Keys (under the job's group "train/a<attempt>"):
//   <group>/e<T>/alive/<id>  an announcement      <group>/e<T>/ticket   the decider's ticket
//   <group>/e<T>/decider     the decider's id     <group>/e<T>/list     the member list, once
//   <group>/e<T>/done/<id>   its reshard is done  <group>/fail/<T>      T failed (a retry follows)
//   <group>/silent/<id>      a watcher found id's progress still at this heartbeat value
// Bounds: the decider waits for a candidate until it announces, its launcher reports it gone,
// or its progress has stood still for its phase's allowance (elastic/progress.h); at most
// `window`. A member waiting for the list gives up on the epoch (posts its failure notice and
// goes on to the next) when the decider is gone in the same sense, or after window + 2 s.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "comm/store.h"
#include "core/status.h"
#include "elastic/member_list.h"
#include "elastic/progress.h"

namespace ntp::elastic {

struct AgreementConfig {
  std::shared_ptr<comm::Store> store;
  std::string group;  // the job's namespace
  int me = 0;         // this member's id (its global rank)
  Progress* progress = nullptr;
  std::chrono::milliseconds hang_detect{1000};
  std::chrono::milliseconds window{10000};
  // The decider parks the candidates of a domain below min_tp (DecisionInput); 0: never.
  int domain_size = 0;
  int min_tp = 1;
  // Whether the launcher reported the current incarnation of `id` gone (the restarts of `list`).
  std::function<bool(int id, const MemberList& list)> exited;
  // Null, or called by this member on its own thread as the decider of `epoch` at `phase`:
  // "decider_publish", after it decided the epoch's list and before it publishes it. A test's
  // fault point (train/fault_point.h): it may not return (SIGKILL), or return much later (SIGSTOP
  // then SIGCONT), and the agreement then goes on as if nothing happened.
  std::function<void(const char* phase, int epoch)> on_phase;
};

std::string fail_key(const std::string& group, int epoch);
std::string done_key(const std::string& group, int epoch, int id);
std::string silent_key(const std::string& group, int id);

// Whether a watcher recorded `id` still and its progress has not moved since.
bool still_silent(comm::Store& store, const std::string& group, int id);

class Agreement {
 public:
  explicit Agreement(AgreementConfig config) : c_(std::move(config)) {}

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
  Status mark_done(int epoch);
  // This member's operation of `epoch` failed: every member of it learns so (best effort).
  void report_failure(int epoch);

 private:
  EpochView view(int epoch);
  // The decided list, or nullopt when the epoch was given up (its failure notice appeared).
  Result<std::optional<MemberList>> decide_epoch(int epoch, const MemberList& last,
                                                 const std::vector<int>& joiners,
                                                 const std::function<std::string()>& encode_layout,
                                                 const std::vector<int>& dropping);
  // `drew_ticket`: this member drew a ticket after the decider's, so a decider that never names
  // itself (it died between its draw and writing its id) is given up after --hang-detect-ms.
  Result<std::optional<MemberList>> await_list(int epoch, const MemberList& last, bool drew_ticket);
  bool complete(const MemberList& list);
  void tick(std::int64_t step);

  AgreementConfig c_;
};

}  // namespace ntp::elastic
