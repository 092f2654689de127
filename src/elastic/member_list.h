// The recovery protocol's decisions, as pure functions (no store, no clock, no communicators):
// what a member announces when it enters the agreement of an epoch, what the decider of that epoch
// publishes, and the rules that make retries safe. elastic/agreement.h runs them against the store;
// tests/elastic/recovery_sim_test.cpp drives them through random fault schedules; the Promela
// model (models/recovery/) checks the same rules; docs/recovery.md maps the three.
//
// The rules, in one place:
//  - Epochs are agreed, not counted: a member enters the agreement of (the last epoch whose list
//    it received) + 1, skipping epochs that are known failed (next_target).
//  - The decider of an epoch is the first member to claim it; a member list is published
//    once per epoch, by the decider only.
//  - The agreed step is the least committed step among the members that hold state: a member
//    ahead of it takes its last update back, and lowers its claimed step in the same action.
//  - The base of a re-formation is the last epoch that every one of its members completed
//    (wrote its done key after its reshard); members keep the base state until their first step
//    in the new epoch has passed its world all-reduce, which proves the new epoch complete. So a
//    fault at any point of a re-formation leaves every member holding the base it is told.
//  - Members of the base that survive hold state ("holders"); everyone else joins (receives).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "core/status.h"

namespace ntp::elastic {

// What a member announces in the agreement of an epoch.
struct Announcement {
  std::int64_t committed = 0;  // the step its held state is at (joiners: unused)
  int restart = 0;             // its incarnation (the launcher's restart count of its slot)
};

// What the decider of an epoch publishes, once; every member re-forms from it.
struct MemberList {
  int epoch = 0;
  std::vector<int> members;       // ids, increasing
  std::vector<int> holders;       // members that hold the base epoch's state, increasing
  std::int64_t step = 0;          // the agreed step: the least committed step of the holders
  int base_epoch = 0;             // the epoch whose layout the re-formation starts from
  std::vector<int> base_members;  // the members of base_epoch (whose state the holders keep)
  std::string base_layout;        // the base epoch's layout, encoded (for members without it)
  std::vector<int> restarts;      // [id]: every slot's incarnation
  int decider = -1;               // who published it (for logs and fault points)
  // Candidates that announced but sit out this epoch: their domain would have fewer than min_tp
  // members, so its replica leaves the job until repairs bring it back (they ask to join again).
  std::vector<int> parked;

  bool has(int id) const;
  bool holds(int id) const;
  bool parks(int id) const;
};

std::string encode(const MemberList& list);
Result<MemberList> decode_member_list(const std::string& text);
// A collected epoch's list key holds a tombstone naming the later epoch whose list superseded it
// (elastic/agreement.h, "Collection"): what a member's walk needs of the epoch, in a few bytes.
std::string encode_tombstone(int superseded_by);
// The epoch a tombstone names; nullopt for any other text (a member list).
std::optional<int> decode_tombstone(const std::string& text);
std::string encode(const Announcement& a);
Result<Announcement> decode_announcement(const std::string& text);

// The list of the job's first epoch: every healthy slot, all holding their drawn state.
MemberList initial_list(const std::vector<int>& members, int slots);

// What the decider of `epoch` knows when it decides.
struct DecisionInput {
  int epoch = 0;
  const MemberList* last = nullptr;  // the last published list (of an epoch < `epoch`)
  bool last_complete = false;        // every member of `last` wrote its done key
  std::string last_layout;           // the decider's encoding of last's layout (when complete)
  std::vector<int> expected;         // candidates: last's members, plus joiners being admitted
  std::map<int, Announcement> announced;
  std::function<bool(int id)> gone;  // exit notice, or progress still (the decider's view)
  bool window_over = false;          // waited the longest it may for a silent candidate
  // Ids are domain * domain_size + slot. With min_tp > 1, the candidates of a domain that would
  // have fewer than min_tp members are parked instead of listed, unless that parks everyone
  // (then the list is published whole, and the job stops: no replica could run).
  int domain_size = 0;
  int min_tp = 1;
  // Candidates to park whatever their domain (measured too slow: treated as failed while they
  // live); their domain is then counted without them.
  std::vector<int> dropped;
};

// The decider's rule: nullopt while some expected candidate has neither announced nor is gone
// (and the window is not over); else the list: the announced (less the parked), with the base
// and the agreed step. Invariant: every holder of the result holds base_epoch's state.
std::optional<MemberList> decide(const DecisionInput& in);

// The states a member holds: the epoch of its current job (the last re-formation it completed)
// and of the base state it kept from that re-formation (until the new epoch proved complete); -1
// for none.
struct HeldEpochs {
  int current = -1;
  int base = -1;
};

// What a member does on receiving a list that names it: the epoch of the state it re-forms from
// (-1: it holds none and receives everything) and whether it first takes back its last update
// (it is one step ahead of the agreed step). kInternal when the list contradicts what it holds: a
// protocol bug, never a fault.
struct ReformPlan {
  int source_epoch = -1;
  bool roll_back = false;
};
Result<ReformPlan> plan_reform(const MemberList& list, int me, HeldEpochs held,
                               std::int64_t committed, bool can_undo);

// What it holds once that re-formation is done: the new epoch, and the base it came from.
HeldEpochs after_reform(const MemberList& list, const ReformPlan& plan);

// What a member can see of an epoch in the store.
struct EpochView {
  bool failed = false;         // its failure notice exists
  std::optional<bool> has_me;  // nullopt: no list published; else whether it names this member
  bool parks_me = false;       // the published list parks this member
  int superseded_by = 0;       // > 0: collected (its list is a tombstone naming this epoch)
};
// The epoch a member enters after a failure, having last received the list of `received`: the
// first later epoch not known failed. kFenced when a later list was published without it (it
// was declared dead while away and must leave; `newest` is then that epoch), kParked when such a
// list parks it (its replica left the job: it asks to join again). `newest` is set to
// the newest such epoch whose list names it (the member adopts that list as its last received
// one, without acting on it). A collected epoch is passed to the epoch that superseded it: every
// epoch in between was failed or listed, and a later list decides this member's place alone.
constexpr int kFenced = -1;
constexpr int kParked = -2;
int next_target(int received, const std::function<EpochView(int epoch)>& view, int* newest);

}  // namespace ntp::elastic
