// One member of the control-plane bench: what an `ntp train` worker runs of the control plane,
// without a model. Its own store connection, the real heartbeat (comm::Heartbeat carrying its
// progress, every elastic::liveness_period: 250 ms), the real failure watch
// (elastic::FailureWatch: blocking reads of the event streams, neighbour looks every 250 ms, 1 s
// hang detection, two ring neighbours), and a "training thread" that waits in a collective
// (progress marked as waiting on its peers) until the watch aborts it; then, as the trainer's
// re-formation does (train/reformation.cpp): report the failed epoch, disarm, the real
// elastic::Agreement, arm the watch for the agreed epoch (it cancels the rendezvous), form the
// groups with the real comm::connect_gloo (world full mesh, then the TP, sync and DP subgroups),
// write its done key.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "bench_timing.h"
#include "comm/communicator.h"
#include "comm/store.h"
#include "comm/survivors.h"
#include "core/non_copyable.h"
#include "elastic/agreement.h"
#include "elastic/failure_watch.h"
#include "elastic/progress.h"
#include "killable_store.h"

namespace ntp::bench {

struct MemberSetup {
  int members = 0;   // the job's slots, ids 0..members-1
  int tp = 8;        // replica size: slot id / tp is its replica
  bool form = true;  // build the new groups after the agreement
  // The groups' links in the world's batch (GlooOptions::planned_subgroups, as build_job does),
  // or a batch per group (the code before).
  bool one_batch = true;
  std::chrono::milliseconds comm_timeout{30000};  // the trainer's --timeout-ms default
  // The agreement's stream reader connected before the fault (elastic::Agreement::prepare, as
  // the trainer does), or at its first read in the agreement.
  bool prepare_agreement = true;
};

// Moments a member reached, in ns of steady_clock; 0 until reached.
struct MemberMoments {
  std::atomic<std::int64_t> aborted{0}, agreed{0}, formed{0};
  // Inside the agreement (AgreementParams::on_enter, on_phase): when it last announced itself
  // in an epoch, and, on the decider, when it last decided a list (before publishing it).
  std::atomic<std::int64_t> announced{0}, decided{0};
  // Inside the formation: when every link of its world (and so of its groups) was up, and when
  // it was past its four groups' barriers.
  std::atomic<std::int64_t> linked{0}, passed{0};
  std::atomic<int> epoch{0}, size{0};  // of the agreed list
};

class BenchMember : NonCopyable {
 public:
  // Starts the heartbeat and an unarmed watch: every member beats before any watch looks
  // (as every worker of a job is up before its first epoch is armed).
  BenchMember(std::shared_ptr<comm::Store> store, int id, const MemberSetup& setup);
  // Arms the watch for the first epoch and starts the training thread.
  void start();
  ~BenchMember();  // releases and joins (waits for a running phase to end)

  // The victim, as a SIGKILLed worker: its store connection is gone at once (nothing it runs
  // reaches the server any more), then its heartbeat stops and its watch is disarmed.
  void die();
  // The groups may be closed: every member formed (or the run is over).
  void release();

  const MemberMoments& moments() const { return moments_; }
  // Empty while running or when the re-formation went well; else what failed.
  std::string error() const;
  // The reason of the last abort its watch called, or empty.
  std::string abort_reason() const;
  bool fired_before_fault() const { return early_abort_.load(); }
  void fault_posted() { fault_posted_.store(true); }

 private:
  void training_thread();
  void on_abort(const std::string& reason);
  Status form(const elastic::MemberList& list);

  std::shared_ptr<KillableStore> store_;
  int id_;
  MemberSetup setup_;
  std::string group_ = "train/a0";
  elastic::Progress progress_;
  std::unique_ptr<comm::Heartbeat> heartbeat_;
  std::unique_ptr<elastic::FailureWatch> watch_;
  elastic::Agreement agreement_;
  MemberMoments moments_;
  std::atomic<bool> fault_posted_{false}, early_abort_{false};
  mutable std::mutex mutex_;
  std::condition_variable wake_;
  bool aborted_ = false, released_ = false, dead_ = false;
  std::string error_, abort_reason_;
  std::vector<std::unique_ptr<comm::Communicator>> groups_;
  std::shared_ptr<std::atomic<bool>> cancel_;
  std::thread thread_;  // last: starts once everything above is built
};

}  // namespace ntp::bench
