// ProgressThread: runs a communicator's operations one at a time, in submission order, on its own
// thread, and hands out Work handles for them. Backend-independent.
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>

#include "comm/communicator.h"
#include "core/non_copyable.h"

namespace ntp::comm {

// A Work whose completion is set exactly once by the progress thread.
class PendingWork : public Work {
 public:
  Status wait() override;
  Status wait_for(std::chrono::milliseconds timeout) override;
  bool done() const override;

  void complete(Status status);

 private:
  mutable std::mutex mutex_;
  std::condition_variable cv_;
  bool done_ = false;
  Status status_;
};

// A Work that is already finished (argument errors found before queueing).
WorkPtr finished_work(Status status);

class ProgressThread : NonCopyable {
 public:
  ProgressThread();
  // Joins the thread after the running operation finishes; operations still queued complete with
  // kUnavailable ("communicator destroyed").
  ~ProgressThread();

  // Queues `op`; its returned Status completes the Work.
  WorkPtr submit(std::function<Status()> op);
  // Runs `op` on the calling thread when nothing is queued or running (no hand-off), otherwise
  // queues it behind the others and waits. Either way operations stay in submission order.
  Status run_or_wait(std::function<Status()> op);

 private:
  void loop();

  std::mutex mutex_;
  std::condition_variable cv_;
  std::deque<std::pair<std::function<Status()>, std::shared_ptr<PendingWork>>> queue_;
  bool stopping_ = false;
  bool busy_ = false;  // an operation is running (on the progress thread or inline)
  std::thread thread_;
};

}  // namespace ntp::comm
