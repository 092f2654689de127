#include "comm/progress_thread.h"

#include <utility>

#include "comm/wait_observer.h"

namespace ntp::comm {

Status PendingWork::wait() {
  const ScopedWait observed;
  std::unique_lock lock(mutex_);
  cv_.wait(lock, [this] { return done_; });
  return status_;
}

Status PendingWork::wait_for(std::chrono::milliseconds timeout) {
  const ScopedWait observed;
  std::unique_lock lock(mutex_);
  if (!cv_.wait_for(lock, timeout, [this] { return done_; })) {
    return deadline_exceeded("operation still running after " + std::to_string(timeout.count()) +
                             " ms of waiting");
  }
  return status_;
}

bool PendingWork::done() const {
  std::lock_guard lock(mutex_);
  return done_;
}

void PendingWork::complete(Status status) {
  {
    std::lock_guard lock(mutex_);
    NTP_CHECK_MSG(!done_, "Work completed twice");
    status_ = std::move(status);
    done_ = true;
  }
  cv_.notify_all();
}

WorkPtr finished_work(Status status) {
  auto work = std::make_shared<PendingWork>();
  work->complete(std::move(status));
  return work;
}

ProgressThread::ProgressThread() : thread_([this] { loop(); }) {}

ProgressThread::~ProgressThread() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

WorkPtr ProgressThread::submit(std::function<Status()> op) {
  auto work = std::make_shared<PendingWork>();
  {
    std::lock_guard lock(mutex_);
    if (stopping_) {
      work->complete(unavailable("communicator destroyed"));
      return work;
    }
    queue_.emplace_back(std::move(op), work);
  }
  cv_.notify_one();
  return work;
}

Status ProgressThread::run_or_wait(std::function<Status()> op) {
  const ScopedWait observed;  // inline or queued, the caller waits on its peers
  {
    std::unique_lock lock(mutex_);
    if (stopping_) return unavailable("communicator destroyed");
    if (!queue_.empty() || busy_) {
      lock.unlock();
      return submit(std::move(op))->wait();
    }
    busy_ = true;
  }
  Status status = op();
  bool queued = false;
  {
    std::lock_guard lock(mutex_);
    busy_ = false;
    queued = !queue_.empty();
  }
  // Wake the progress thread only for work submitted while this ran: a wake-up per inline
  // operation costs a context switch, which is measurable on small messages.
  if (queued) cv_.notify_one();
  return status;
}

void ProgressThread::loop() {
  for (;;) {
    std::function<Status()> op;
    std::shared_ptr<PendingWork> work;
    {
      std::unique_lock lock(mutex_);
      cv_.wait(lock, [this] { return stopping_ || (!queue_.empty() && !busy_); });
      if (queue_.empty()) return;  // stopping and drained
      if (stopping_) {
        // Fail what is left rather than run it against a communicator being torn down.
        for (auto& entry : queue_) entry.second->complete(unavailable("communicator destroyed"));
        queue_.clear();
        return;
      }
      op = std::move(queue_.front().first);
      work = std::move(queue_.front().second);
      queue_.pop_front();
      busy_ = true;
    }
    Status status = op();
    {
      std::lock_guard lock(mutex_);
      busy_ = false;
    }
    // Only this thread waits on cv_ for busy_ to clear; it re-checks the queue at the loop top.
    work->complete(std::move(status));
  }
}

}  // namespace ntp::comm
