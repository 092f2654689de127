// AbortWatch: turns one rank's failure notice in the store into an abort on every rank, so that
// every survivor learns of a fault within one poll interval instead of at its timeout.
//
// Whichever rank detects a fault first (an operation failed, a heartbeat went stale, the launcher
// reaped a worker) posts a notice under a key of the current membership epoch:
//
//   comm::post_abort(*store, "train/e3/abort", "rank 2: allreduce: peer closed");
//
// and every rank runs one AbortWatch on that key, whose callback aborts every communicator of the
// epoch (Communicator::abort wakes the running operation at once, see communicator.h):
//
//   auto dp = comm::connect_gloo(...);  auto tp = ...;
//   comm::AbortWatch watch(store, "train/e3/abort", 20ms, [&](const std::string& why) {
//     dp->abort(why);
//     tp->abort(why);
//   });
//
// Declare the watch after the communicators it aborts (or reset it first): its destructor joins
// the polling thread, so the callback never runs on a destroyed communicator. Use a fresh key per
// epoch: a notice stays in the store, and a watch on an old key fires at once.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "comm/store.h"
#include "core/non_copyable.h"
#include "core/status.h"

namespace ntp::comm {

// Posts the notice: sets `key` to `reason` (the first poster's reason is what the watches
// usually see; a later poster overwrites it, which is harmless).
Status post_abort(Store& store, const std::string& key, const std::string& reason);

class AbortWatch : NonCopyable {
 public:
  // Starts a thread that checks every `interval` whether `key` exists, and the first time it does
  // calls `on_abort(value)` once, on that thread, then stops polling. Store errors count as "no
  // notice yet" (the next poll tries again).
  AbortWatch(std::shared_ptr<Store> store, std::string key, std::chrono::milliseconds interval,
             std::function<void(const std::string& reason)> on_abort);
  // Stops polling and joins the thread (waits for a callback that is running).
  ~AbortWatch();

  // True once the callback has been called (it may still be running).
  bool fired() const { return fired_.load(); }

 private:
  void run();

  std::shared_ptr<Store> store_;
  std::string key_;
  std::chrono::milliseconds interval_;
  std::function<void(const std::string&)> on_abort_;
  std::atomic<bool> fired_{false};
  std::mutex mutex_;
  std::condition_variable wake_;
  bool stop_ = false;
  std::thread thread_;  // last: starts after every other member is initialized
};

}  // namespace ntp::comm
