// The trainer's side of the domain hierarchy's control plane (`ntp train --control-plane
// hierarchy`, docs/design/control-plane-hierarchy.md): a HierarchyRuntime over the launcher's
// stores (ntp launch --domain-size: the job's store for the leaders, NTP_DOMAIN_STORE for the
// domain), seen by the training thread through the flat protocol's verbs:
//   watch(job)          the job a re-formation aborts (the flat watch's abort);
//   report_failure(E)   a step on epoch E's groups failed (a peer gone);
//   next_list()         the full list to re-form on (the flat agreement's list);
//   formed(list, s)     the re-formation on it ended (the flat done key, or its failure).
// The runtime hands each full list to its `form`, on one of its threads, which gives it to the
// training thread and waits for formed(); a domain that re-forms again meanwhile aborts the job
// being built and drops a list not yet taken. The domain's beat carries the training thread's
// progress, so a stalled training thread is taken as hung, as the flat watch takes it, and the
// worker beats on no other store. What it does not do yet: joiners and drops (step 4),
// rebalancing, and the relay of link addresses (the trainer's groups form over the job's store).
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include "core/non_copyable.h"
#include "core/status.h"
#include "elastic/hierarchy_runtime.h"
#include "elastic/member_list.h"
#include "train/job.h"
#include "train/train_config.h"
#include "train/trainer.h"

namespace ntp::train {

class HierarchyPlane : NonCopyable {
 public:
  // Its domain's agreement hears the member's committed step (set_committed) and incarnation;
  // its domain's beat carries `progress` (the training thread's, which must outlive it): the
  // worker's one heartbeat, by which a stalled training thread is seen. The member announces
  // itself in a domain agreement only once the training thread waits in next_list (as the flat
  // protocol's training thread announces itself), and if the others record it silent first, it
  // is fenced: `on_fenced` (the trainer exits) on one of the runtime's threads.
  HierarchyPlane(const TrainConfig& c, const WorkerContext& ctx, elastic::Progress* progress,
                 std::function<void()> on_fenced);
  // Stops the runtime first: a form waiting for the training thread is released.
  ~HierarchyPlane();

  // Arms the watches on the job's first lists; every worker beats by then (its first job's
  // rendezvous needed all of them).
  void start();
  // The job a re-formation aborts from now (null: none); cleared before that job goes.
  void watch(Job* job);
  void report_failure(int epoch);
  // The beat goes out now (the first step: elastic/progress.h's setup allowance ends).
  void beat_now() { runtime_->beat_now(); }
  // The step its state is at, announced in its domain's next agreement (read on a runtime
  // thread: a member's step moves on while its domain may start to agree).
  void set_committed(std::int64_t step) { committed_.store(step); }
  // The next full list the runtime agreed, once it has one: kAborted when the member was declared
  // dead (it leaves the job), kDeadlineExceeded past `patience`, kInternal on a protocol error.
  Result<elastic::MemberList> next_list(std::chrono::milliseconds patience);
  // The re-formation on `list` ended with `status` (ok: the groups are up and the state moved).
  void formed(const elastic::MemberList& list, const Status& status);

 private:
  // The runtime's formation: hands `full` to the training thread, waits for formed().
  Status form(const elastic::MemberList& full);
  // The runtime's domain re-forms: abort the watched job, drop a list not yet taken.
  void reforming();
  // The runtime left the job: abort the watched job, wake next_list.
  void left();
  // The runtime's owner_ready: whether the training thread waits in next_list, within `wait`.
  bool ready(std::chrono::milliseconds wait);

  std::mutex mutex_;
  std::condition_variable changed_;
  Job* watched_ = nullptr;
  std::optional<elastic::MemberList> offered_;  // handed over by form, not yet taken
  std::optional<int> taken_epoch_;              // the list the training thread forms on
  std::optional<Status> result_;                // formed()'s, for taken_epoch_
  bool withdrawn_ = false;  // the domain re-formed since form's offer: form returns
  bool stale_ = false;      // the domain re-formed since the training thread took its list
  bool stopping_ = false;
  bool left_ = false;          // the runtime left the job
  bool in_next_list_ = false;  // the training thread waits for its next list
  std::atomic<std::int64_t> committed_{0};
  std::unique_ptr<elastic::HierarchyRuntime> runtime_;  // last: its threads call the above
};

}  // namespace ntp::train
