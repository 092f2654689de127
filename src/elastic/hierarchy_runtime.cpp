#include "elastic/hierarchy_runtime.h"

#include <chrono>
#include <optional>
#include <thread>
#include <utility>
#include <vector>

#include "comm/exit_notice.h"
#include "elastic/agreement.h"

namespace ntp::elastic {
namespace {

std::int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch())
      .count();
}

// Domain tasks that run at once in a recovery: the agreement, the await of the full list, and
// a leader's relay (or the done key).
constexpr int kPreparedDomainDrivers = 2;

}  // namespace

HierarchyRuntime::HierarchyRuntime(HierarchyRuntimeSetup setup)
    : setup_(std::move(setup)),
      carried_(setup_.progress != nullptr ? setup_.progress : &progress_),
      machine_(
          [this] {
            HierarchyMemberParams p = setup_.member;
            p.progress = &progress_;
            return p;
          }(),
          *this) {
  const HierarchyMemberParams& p = setup_.member;
  domain_beat_ = std::make_unique<comm::Heartbeat>(setup_.domain_store, p.domain_group, p.slot,
                                                   liveness_period(p.hang_detect),
                                                   [this] { return carried_->token(); });
  domain_watch_ =
      std::make_unique<FailureWatch>(setup_.domain_store, liveness_period(p.hang_detect),
                                     p.hang_detect, carried_, [this] { fenced(); });
  std::lock_guard<std::mutex> lock(mutex_);
  for (int i = 0; i < kPreparedDomainDrivers; ++i) {
    auto driver = std::make_unique<StoreDriver>(*setup_.domain_store);
    (void)driver->prepare_reader();  // a store away now: the first read connects
    give_driver(StoreLevel::kDomain, std::move(driver));
  }
  spawn([this] { event_thread(); });
}

HierarchyRuntime::~HierarchyRuntime() {
  std::unique_lock<std::mutex> lock(mutex_);
  stopping_ = true;
  machine_.stop();
  domain_watch_->disarm();
  if (global_watch_) global_watch_->disarm();
  jobs_.clear();  // their tasks' frames, under the lock
  work_.notify_all();
  {
    std::lock_guard<std::mutex> queue_lock(queue_mutex_);
    queue_stop_ = true;
  }
  queue_wake_.notify_all();
  threads_done_.wait(lock, [this] { return threads_ == 0; });
}

void HierarchyRuntime::start() {
  std::lock_guard<std::mutex> lock(mutex_);
  training_epoch_ = 0;  // the job's first lists
  machine_.start();
}

void HierarchyRuntime::beat_now() { domain_beat_->beat_now(); }

void HierarchyRuntime::report_failure(int epoch) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (stopping_ || epoch != training_epoch_) return;
  machine_.report_failure();
}

std::shared_ptr<const MemberList> HierarchyRuntime::training_on() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return training_on_;
}

int HierarchyRuntime::formation_failures() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return formation_failures_;
}

int HierarchyRuntime::reformations() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return reformations_;
}

std::string HierarchyRuntime::error() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return machine_.error().empty() ? form_error_ : machine_.error();
}

std::string HierarchyRuntime::first_domain_verdict() const {
  const std::lock_guard<std::mutex> lock(queue_mutex_);
  return first_domain_verdict_;
}

bool HierarchyRuntime::left() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return left_;
}

// Under mutex_ (from the machine, or the constructor).
void HierarchyRuntime::spawn(std::function<void()> fn) {
  ++threads_;
  std::thread([this, fn = std::move(fn)]() mutable {
    {
      std::function<void()> run = std::move(fn);  // gone before the count says so
      run();
    }
    std::lock_guard<std::mutex> lock(mutex_);
    if (--threads_ == 0) threads_done_.notify_all();
  }).detach();
}

void HierarchyRuntime::event_thread() {
  while (true) {
    std::function<void()> fn;
    {
      std::unique_lock<std::mutex> queue_lock(queue_mutex_);
      queue_wake_.wait(queue_lock, [this] { return queue_stop_ || !queue_.empty(); });
      if (queue_stop_) return;
      fn = std::move(queue_.front());
      queue_.pop_front();
    }
    std::lock_guard<std::mutex> lock(mutex_);
    if (!stopping_ && *machine_.live()) fn();
  }
}

void HierarchyRuntime::submit(Job job) {
  jobs_.push_back(std::move(job));
  if (idle_workers_ >= static_cast<int>(jobs_.size())) {
    work_.notify_one();
  } else {
    spawn([this] { worker_thread(); });
  }
}

void HierarchyRuntime::worker_thread() {
  std::unique_lock<std::mutex> lock(mutex_);
  while (true) {
    ++idle_workers_;
    work_.wait(lock, [this] { return stopping_ || !jobs_.empty(); });
    --idle_workers_;
    if (stopping_) return;
    Job job = std::move(jobs_.front());
    jobs_.pop_front();
    job(lock);
  }
}

std::unique_ptr<StoreDriver> HierarchyRuntime::take_driver(StoreLevel level) {
  std::vector<std::unique_ptr<StoreDriver>>& idle = idle_drivers_[static_cast<int>(level)];
  if (idle.empty()) return std::make_unique<StoreDriver>(*store(level));
  std::unique_ptr<StoreDriver> driver = std::move(idle.back());
  idle.pop_back();
  return driver;
}

void HierarchyRuntime::give_driver(StoreLevel level, std::unique_ptr<StoreDriver> driver) {
  idle_drivers_[static_cast<int>(level)].push_back(std::move(driver));
}

// A task's job: its ops one after another on a driver of its own, each without the lock; the
// task is resumed, and destroyed, under it.
void HierarchyRuntime::run(StoreLevel level, IoSlot& io, Task<Status> task,
                           std::shared_ptr<bool> live) {
  auto owned = std::make_shared<std::optional<Task<Status>>>(std::move(task));
  submit([this, level, &io, owned, live](std::unique_lock<std::mutex>& lock) {
    if (stopping_ || !*live) return;
    std::unique_ptr<StoreDriver> driver = take_driver(level);
    io.set_now(Clock::now());
    (*owned)->start();
    while (!stopping_ && *live && io.has_pending()) {
      io::Op op = io.take_pending();
      lock.unlock();
      io::Reply reply = driver->perform(std::move(op));
      lock.lock();
      if (stopping_ || !*live) break;
      io.resume(std::move(reply));
    }
    owned->reset();  // a dropped task's frame, under the lock its steps ran under
    give_driver(level, std::move(driver));
  });
}

// Under mutex_, or on a watch's thread under that watch's lock: queued only.
void HierarchyRuntime::defer(std::function<void()> fn) {
  {
    std::lock_guard<std::mutex> queue_lock(queue_mutex_);
    queue_.push_back(std::move(fn));
  }
  queue_wake_.notify_one();
}

WatchedEpoch HierarchyRuntime::watched(StoreLevel level, const MemberList& list) {
  const HierarchyMemberParams& p = setup_.member;
  const bool domain = level == StoreLevel::kDomain;
  WatchedEpoch e;
  e.group = domain ? p.domain_group : p.global_group;
  e.epoch = list.epoch;
  e.me = domain ? p.slot : p.domain;
  e.members = list.members;
  // The launcher's incarnation of each slot (a domain's launcher posts exits on its store; none
  // reach the global store, whose ids are domains).
  e.incarnations.assign(static_cast<size_t>(domain ? p.domain_size : p.domain_count),
                        comm::incarnation(0, 0));
  e.abort = [this, domain](const std::string& reason) {
    if (domain) {
      const std::lock_guard<std::mutex> lock(queue_mutex_);  // the one a callback may take
      if (first_domain_verdict_.empty()) {
        first_domain_verdict_ = reason;
        moments_.aborted.store(now_ns());
      }
    }
    defer([this, domain] { domain ? machine_.domain_failed() : machine_.global_failed(); });
  };
  return e;
}

void HierarchyRuntime::arm_watch(StoreLevel level, const MemberList& list) {
  if (level == StoreLevel::kDomain && list.epoch > 0) moments_.domain_agreed.store(now_ns());
  (level == StoreLevel::kDomain ? domain_watch_ : global_watch_)->arm(watched(level, list));
}

void HierarchyRuntime::disarm_watch(StoreLevel level) {
  (level == StoreLevel::kDomain ? domain_watch_ : global_watch_)->disarm();
}

// The leaders' heartbeat under the domain's id and their watch, from now (a takeover's at once).
// The beat carries the runtime's own progress, not the trainer's: the leaders judge whether a
// domain's speaker lives; a stalled training thread is its domain's watch's to see (sooner: its
// bound is a third of theirs), and the domain re-forms and takes the lead over.
void HierarchyRuntime::lead(const MemberList& global, bool /*takeover*/) {
  const HierarchyMemberParams& p = setup_.member;
  global_beat_ = std::make_unique<comm::Heartbeat>(setup_.global_store, p.global_group, p.domain,
                                                   liveness_period(p.global_hang_detect),
                                                   [this] { return progress_.token(); });
  global_watch_ = std::make_unique<FailureWatch>(
      setup_.global_store, liveness_period(p.global_hang_detect), p.global_hang_detect, &progress_,
      [this] { defer([this] { leave(); }); });
  global_watch_->arm(watched(StoreLevel::kGlobal, global));
}

void HierarchyRuntime::fenced() {
  if (setup_.on_fenced) setup_.on_fenced();
  defer([this] { leave(); });
}

// A worker waits for the owner, a liveness period at a time, and looks at the member's silent
// record between waits (the domain watch, which would, is disarmed while the domain agrees).
void HierarchyRuntime::when_ready(std::shared_ptr<bool> live, std::function<void()> go) {
  if (!setup_.owner_ready) return go();
  submit([this, live = std::move(live), go = std::move(go)](std::unique_lock<std::mutex>& lock) {
    const HierarchyMemberParams& p = setup_.member;
    while (*live && !stopping_) {
      lock.unlock();
      const bool ready = setup_.owner_ready(liveness_period(p.hang_detect));
      const bool stuck = !ready && still_silent(*setup_.domain_store, p.domain_group, p.slot);
      if (stuck) fenced();
      lock.lock();
      if (stuck) return;
      if (ready) {
        if (*live && !stopping_) go();
        return;
      }
    }
  });
}

void HierarchyRuntime::relayed(std::shared_ptr<const MemberList>, std::shared_ptr<bool>) {
  moments_.relayed.store(now_ns());
}

void HierarchyRuntime::reforming() {
  training_on_ = nullptr;
  training_epoch_ = -1;
  if (setup_.on_reforming) setup_.on_reforming();
  moments_.agreed.store(0);
  moments_.formed.store(0);
}

void HierarchyRuntime::got_full(std::shared_ptr<const MemberList> full,
                                std::shared_ptr<bool> live) {
  moments_.agreed.store(now_ns());
  if (!setup_.form) {
    machine_.resume_training();
    return;
  }
  submit(
      [this, full = std::move(full), live = std::move(live)](std::unique_lock<std::mutex>& lock) {
        lock.unlock();
        const Status formed = setup_.form(*full);
        lock.lock();
        if (stopping_ || !*live || !*machine_.live()) return;  // dead, or the domain re-forms again
        if (formed.code() == StatusCode::kUnavailable) {
          // A peer went before any watch saw it (the formation's timeout or a refused link): the
          // epoch failed, as the flat trainer's re-formation reports it; the domain re-forms once
          // its watch reads the failure.
          ++formation_failures_;
          machine_.report_failure();
          return;
        }
        if (!formed.ok()) {
          if (form_error_.empty()) form_error_ = formed.to_string();
          return;
        }
        machine_.groups_formed();
      });
}

void HierarchyRuntime::training() {
  moments_.formed.store(now_ns());
  training_on_ = machine_.full();
  training_epoch_ = training_on_->epoch;
  ++reformations_;
}

// Its heartbeats stop, as the process that exits: the owner reads left() and exits.
void HierarchyRuntime::leave() {
  if (left_) return;
  left_ = true;
  machine_.stop();
  domain_beat_.reset();
  global_beat_.reset();
  if (setup_.on_left) setup_.on_left();
}

}  // namespace ntp::elastic
