// The runtime's driver of a HierarchyMember (elastic/hierarchy_member.h): one member process's
// side of the domain hierarchy over two real stores, its domain's and the global one. The
// simulator's driver (elastic/sim/hierarchy_sim.cpp) runs the same machine in virtual time.
//
// How it runs the machine:
//   - under one lock, on whatever thread holds it: the member's event thread (the watches'
//     verdicts, deferred steps) or a task's worker;
//   - every task on a worker of the member's pool, with a StoreDriver (and so a stream reader)
//     of its own on the level's store while it runs: an op is done without the lock (a blocking
//     read waits up to seconds), and its reply resumes the task under it. Workers and drivers are
//     kept for the next task: a recovery starts no thread and opens no connection while the
//     pool has them (two domain drivers are connected at the start, as the flat trainer
//     prepares its agreement's reader before any fault);
//   - the watches are the runtime's own: a comm::Heartbeat and an elastic::FailureWatch over the
//     domain's slots on the domain's store, and while the member leads, another pair over the
//     domains on the global store, beating under the domain's id. A watch calls back on its
//     thread under its own lock, and the machine arms and disarms it under the member's lock, so
//     a verdict is queued for the event thread, never acted on in the callback;
//   - the formation is the caller's `form`, on a worker, over its domain's store; once the groups
//     are up the member marks its domain epoch done and trains. The machine's leader relays the
//     addresses of its members' links to other domains (elastic/address_relay.h) where the
//     member's params name the formation's mesh prefix.
// Its stores are the launcher's: `ntp launch --domain-size` gives each worker its domain's
// (launch::open_domain_store) and posts exit notices there. `ntp train --control-plane hierarchy`
// drives it (train/hierarchy_plane.h). What it does not have yet (docs/design/
// control-plane-hierarchy.md, "the steps left"): joiners and drops.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "comm/store.h"
#include "comm/survivors.h"
#include "core/non_copyable.h"
#include "core/status.h"
#include "elastic/failure_watch.h"
#include "elastic/hierarchy_member.h"
#include "elastic/progress.h"
#include "elastic/store_driver.h"

namespace ntp::elastic {

// When a member's recovery reached each step, in ns of Clock (0: not yet), as the simulator
// reports them (SimResult's abort, agreement, formation): its domain watch's first verdict, its
// last full list taken, and its training again on it (the last re-formation's: an earlier one's
// moments are cleared when the domain re-forms again).
struct HierarchyMoments {
  std::atomic<std::int64_t> aborted{0}, agreed{0}, formed{0};
  // Within the agreement: its last domain list agreed (its domain watch armed on it), and as a
  // leader its last full list relayed into its domain.
  std::atomic<std::int64_t> domain_agreed{0}, relayed{0};
};

struct HierarchyRuntimeSetup {
  HierarchyMemberParams member;  // its `progress` is ignored: the runtime marks its own
  std::shared_ptr<comm::Store> domain_store, global_store;
  // The trainer's formation of its groups on `full` (ok: they are up; kUnavailable: a peer is
  // gone, and the member fails its domain's epoch, which re-forms; any other error stops the
  // member, error()), on a worker thread without the member's lock. Null: none; the member trains
  // on its full list at once, and marks no done key. Where it publishes its links' addresses is the
  // member's `mesh_prefix`: set, the member's leader relays those of links across domains.
  std::function<Status(const MemberList& full)> form;
  // Called when its domain starts to re-form (its domain's watch fired, or the leaders' did, or a
  // failure was reported): the groups it trains on are stale, and the owner aborts what runs on
  // them (the flat watch's abort). Under the runtime's lock, on one of its threads: it must not
  // block or call the runtime. Null: nothing.
  std::function<void()> on_reforming;
  // Called once when the member leaves the job (it read that it was declared dead, or a list was
  // agreed without it), under the runtime's lock on one of its threads: it must not block or call
  // the runtime. The owner's thread, stuck or not, may not look at left() for a while. Null:
  // nothing.
  std::function<void()> on_left;
  // Whether the owner is ready to re-form (its training thread left its job and waits for the
  // list), waiting up to the given time for it; on a worker thread without the runtime's lock.
  // The member announces itself in its domain's agreement only once it is (when_ready). Null:
  // always ready.
  std::function<bool(std::chrono::milliseconds)> owner_ready;
  // Called when the member is fenced: a watcher recorded its carried progress silent and it has
  // not moved since (its domain's watch found so, or the wait for owner_ready did), so the others
  // go on without it while its owner's thread is stuck and will never look at left(). The
  // trainer exits. On one of the runtime's threads, without its lock. Null: it just leaves.
  std::function<void()> on_fenced;
  // The owner's training thread's progress (the trainer's, marked at every phase): carried in the
  // runtime's beats and judged by its watches, so that a training thread that stalls while the
  // process lives is taken as hung, and it is the process's one heartbeat. Null: the runtime's
  // own, which only its machine marks (a member that runs no training thread). Must outlive it.
  Progress* progress = nullptr;
};

class HierarchyRuntime : NonCopyable, private HierarchyDriver {
 public:
  // Starts its domain heartbeat: every member of a domain should beat before any watch looks (as
  // every worker of a job is up before its first epoch is armed), so start() comes later.
  explicit HierarchyRuntime(HierarchyRuntimeSetup setup);
  // Stops the member, then waits for its threads (a blocking read ends within its block).
  ~HierarchyRuntime() override;

  // Arms its domain watch on the job's first lists (slot 0 leads its domain): the job runs.
  void start();

  // The owner's step on the groups of global epoch `epoch` failed (a peer gone, before any watch
  // said so): while it trains on that epoch, its domain's epoch fails and the domain re-forms
  // (HierarchyMember::report_failure); a stale epoch's report is dropped.
  void report_failure(int epoch);

  // The full list it trains on; null while it re-forms, and before its first re-formation.
  std::shared_ptr<const MemberList> training_on() const;
  // How many times it trained again after a re-formation.
  int reformations() const;
  // How many of its formations failed with kUnavailable (a peer gone): each failed its domain's
  // epoch, and the domain re-formed.
  int formation_failures() const;
  // The first error of the member's steps or its formation ("": none).
  std::string error() const;
  // It read that it was declared dead: the process should exit.
  bool left() const;
  const HierarchyMoments& moments() const { return moments_; }
  // Why its domain watch first took the domain's epoch as failed ("": it never did): the
  // launcher's exit notice, a member's posted failure, or a member that made no progress.
  std::string first_domain_verdict() const;
  // Its domain beat goes out now, not at the next period (the trainer's first step: see
  // elastic/progress.h's setup allowance).
  void beat_now();

 private:
  // HierarchyDriver.
  void run(StoreLevel level, IoSlot& io, Task<Status> task, std::shared_ptr<bool> live) override;
  void defer(std::function<void()> fn) override;
  void arm_watch(StoreLevel level, const MemberList& list) override;
  void disarm_watch(StoreLevel level) override;
  void lead(const MemberList& global, bool takeover) override;
  void reforming() override;
  void when_ready(std::shared_ptr<bool> live, std::function<void()> go) override;
  void got_full(std::shared_ptr<const MemberList> full, std::shared_ptr<bool> live) override;
  void relayed(std::shared_ptr<const MemberList>, std::shared_ptr<bool>) override;
  void training() override;
  void leave() override;

  // A worker's job: run with mutex_ held, which it may release and take again.
  using Job = std::function<void(std::unique_lock<std::mutex>&)>;
  // Under mutex_: `job` goes to an idle worker, or a new one.
  void submit(Job job);
  void worker_thread();
  // Under mutex_: a driver on `level`'s store from the pool (or a new one), and back.
  std::unique_ptr<StoreDriver> take_driver(StoreLevel level);
  void give_driver(StoreLevel level, std::unique_ptr<StoreDriver> driver);
  // Runs `fn` on a thread of its own, counted so that the destructor can wait for it.
  void spawn(std::function<void()> fn);
  void event_thread();
  // Recorded silent while stuck: the owner's on_fenced, then the member leaves.
  void fenced();
  std::shared_ptr<comm::Store> store(StoreLevel level) const {
    return level == StoreLevel::kDomain ? setup_.domain_store : setup_.global_store;
  }
  WatchedEpoch watched(StoreLevel level, const MemberList& list);

  HierarchyRuntimeSetup setup_;
  Progress progress_;  // the machine's marks; its beats carry it unless the setup names another
  Progress* const carried_;   // what its beats carry and its watches judge
  mutable std::mutex mutex_;  // the machine's, and every field below but the queue's
  bool stopping_ = false;
  bool left_ = false;
  int reformations_ = 0;
  int formation_failures_ = 0;
  std::string form_error_;
  std::shared_ptr<const MemberList> training_on_;
  int training_epoch_ = -1;  // the global epoch it trains on (0 from start()), -1 while re-forming
  HierarchyMoments moments_;
  // The event thread's queue, under its own lock (a watch's callback takes no other).
  mutable std::mutex queue_mutex_;
  std::condition_variable queue_wake_;
  std::deque<std::function<void()>> queue_;
  bool queue_stop_ = false;
  std::string first_domain_verdict_;  // under queue_mutex_ (set in a watch's callback)
  // Threads running (workers and the event thread), under mutex_.
  int threads_ = 0;
  std::condition_variable threads_done_;
  // The worker pool, under mutex_: jobs not yet taken, and workers waiting for one.
  std::deque<Job> jobs_;
  int idle_workers_ = 0;
  std::condition_variable work_;
  std::vector<std::unique_ptr<StoreDriver>> idle_drivers_[2];  // [StoreLevel]
  HierarchyMember machine_;
  std::unique_ptr<comm::Heartbeat> domain_beat_, global_beat_;
  std::unique_ptr<FailureWatch> domain_watch_, global_watch_;
};

}  // namespace ntp::elastic
