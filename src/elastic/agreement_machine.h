// The agreement of a re-formation as a machine (elastic/task.h): a member enters the epoch that
// next_target names, announces itself, and either decides (its claim of the epoch's decider key
// came first) or waits for the decider's list. The rules are member_list.h's; this adds the
// sequence of store operations and the bounds, and awaits every operation instead of doing it, so
// that the runtime (elastic/agreement.h: a comm::Store and the wall clock) and the simulator
// (elastic/sim/) drive the same code. The keys, the store load and the bounds are described in
// elastic/agreement.h.
#pragma once

#include <chrono>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "core/non_copyable.h"
#include "core/status.h"
#include "elastic/member_list.h"
#include "elastic/progress.h"
#include "elastic/task.h"

namespace ntp::elastic {

// What the machine knows of its member and job; no store, no clock.
struct AgreementParams {
  std::string group;             // the job's namespace
  int me = 0;                    // this member's id (its global rank)
  Progress* progress = nullptr;  // marked at every wait (null: none)
  std::chrono::milliseconds hang_detect{1000};
  std::chrono::milliseconds window{10000};
  // The decider parks the candidates of a domain below min_tp (DecisionInput); 0: never.
  int domain_size = 0;
  int min_tp = 1;
  // The incarnation of `id` whose exit notice (comm/exit_notice.h) means it is gone (from the
  // restarts of `list`); empty: exit notices are not looked at.
  std::function<std::string(int id, const MemberList& list)> incarnation;
  // Null, or called by this member as the decider of `epoch` at `phase` ("decider_publish": after
  // it decided the epoch's list and before it publishes it). A fault point (train/fault_point.h):
  // the runtime's may not return (SIGKILL), or return much later (SIGSTOP then SIGCONT), and the
  // agreement then goes on as if nothing happened.
  std::function<void(const char* phase, int epoch)> on_phase;
  // Null, or called with each epoch this member announces itself in (the domain hierarchy's
  // leader fails the global epoch it is in when its domain changes under it).
  std::function<void(int epoch)> on_enter;
};

// Who posts an epoch's failure: a member that found the fault itself (its liveness watch saw a
// neighbour still), or one that relays a failure it heard of or met (a failed step, a global
// failure into its domain).
enum class FailurePoster { kRelay, kWitness };

// Epoch `epoch` of the job `group` failed: its key, then the job's event "fail <epoch>" (a reader
// woken by the event finds the key). A relayer sends the event only as the key's first poster,
// so that the stream holds about one event per failed epoch, not one per member. A witness
// (a hang's one or two ring neighbours) sends it whatever its count: the first poster may have
// been stopped or killed between its count and its event, and the members that heard of the
// fault from no one else would wait for that process (found by control_plane_sim --fault mixed,
// seed 881, a leader paused 5 s: the domain learnt nothing until it woke, and the job fenced it).
Task<Status> post_failure(IoSlot& io, std::string group, int epoch,
                          FailurePoster poster = FailurePoster::kRelay);

class AgreementMachine : NonCopyable {
 public:
  // `io` carries this machine's awaits; it must outlive the machine and every task it returns.
  AgreementMachine(AgreementParams params, IoSlot& io) : p_(std::move(params)), io_(io) {}

  // Agreement::agree's contract (elastic/agreement.h). `last` must outlive the task.
  Task<Result<MemberList>> agree(MemberList& last, Announcement mine, bool joiner,
                                 std::vector<int> joiners,
                                 std::function<std::string()> encode_layout,
                                 std::vector<int> dropping);
  // Agreement::mark_done's contract.
  Task<Status> mark_done(MemberList list);
  // This member's operation of `epoch` failed: post_failure below.
  Task<Status> report_failure(int epoch);

 private:
  Task<EpochView> view(int epoch);
  // The epoch next_target names after `received`, reading each epoch it walks once.
  Task<int> walk(int received, int* newest);
  Task<Result<std::optional<MemberList>>> decide_epoch(
      int epoch, const MemberList& last, const std::vector<int>& joiners,
      const std::function<std::string()>& encode_layout, const std::vector<int>& dropping);
  Task<Result<std::optional<MemberList>>> await_list(int epoch, const MemberList& last);
  // One look at the expected candidates that have not announced: `gone` becomes those the
  // launcher reported gone, recorded silent, or seen still; true when the epoch failed.
  Task<bool> look_at_absent(int epoch, const MemberList& last, const std::vector<int>& expected,
                            const std::map<int, Announcement>& announced, Stillness& stillness,
                            std::set<int>& gone);
  Task<bool> complete(const MemberList& list);
  Task<Status> collect_below(int below);
  // The list published for `epoch`; nullopt when it was collected (a tombstone).
  Task<Result<std::optional<MemberList>>> read_list(int epoch);
  void tick(std::int64_t step);
  bool reported_gone(int id, const MemberList& last, const std::optional<std::string>& notice);

  AgreementParams p_;
  IoSlot& io_;
};

}  // namespace ntp::elastic
