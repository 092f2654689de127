// FailureWatch: makes every survivor of a job learn of a fault within a bounded time, whatever
// its pending operation is waiting for.
//
// A background thread watches the current membership epoch, every `poll`, for three signs:
//   - a failure notice "<group>/fail/<epoch>": written by any member whose step failed
//     (report_failure), so one rank's connection error reaches all others;
//   - the launcher's exit notice for a member's current incarnation (comm/exit_notice.h): a
//     killed or crashed worker, known the moment its launcher reaped it;
//   - a hung member: the heartbeat of one of this worker's two ring neighbours among the members
//     has not moved for `stale_after`; the watcher then records the still value under
//     "<group>/silent/<id>" (still_silent) and writes the failure notice. Each member
//     watches two neighbours, so every member is watched by two others and the store load per
//     worker does not grow with the job. (A member that was only slow is not excluded by this:
//     it announces itself in the agreement that follows and stays a member.)
// On the first sign it calls the epoch's `abort` once (the trainer aborts every communicator of
// the job: their pending waits fail at once and the step fails on every rank).
//
// Contract: arm() before the first operation of an epoch, disarm() before its communicators are
// destroyed; abort is never called outside arm..disarm. Thread-safe.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "comm/store.h"

namespace ntp::train {

struct WatchedEpoch {
  std::string group;  // the job's store namespace ("train/a<attempt>")
  int epoch = 0;
  int me = 0;                                      // this worker's id (its global rank)
  std::vector<int> members;                        // ids, increasing
  std::function<std::string(int id)> incarnation;  // of a member, as the launcher names it
  std::function<void(const std::string& reason)> abort;
};

class FailureWatch {
 public:
  FailureWatch(std::shared_ptr<comm::Store> store, std::chrono::milliseconds poll,
               std::chrono::milliseconds stale_after);
  ~FailureWatch();
  FailureWatch(const FailureWatch&) = delete;
  FailureWatch& operator=(const FailureWatch&) = delete;

  void arm(WatchedEpoch epoch);
  void disarm();

  // This worker's step failed in `epoch`: tell every member (best effort).
  void report_failure(const std::string& group, int epoch);

  // Whether a watcher found `id`'s heartbeat still and it has not moved since (for the
  // agreement's known_dead: a member alive after all beats again within 100 ms).
  static bool still_silent(comm::Store& store, const std::string& group, int id);

 private:
  void run();
  void check_locked();
  void fire_locked(const std::string& reason);

  std::shared_ptr<comm::Store> store_;
  std::chrono::milliseconds poll_, stale_after_;
  std::mutex mutex_;
  std::condition_variable wake_;
  bool stop_ = false;
  bool armed_ = false;
  bool fired_ = false;
  WatchedEpoch current_;
  std::int64_t exits_seen_ = 0;
  struct Beat {
    std::string value;
    std::chrono::steady_clock::time_point since;
  };
  std::map<int, Beat> beats_;  // the neighbours' last heartbeat values
  std::thread thread_;
};

}  // namespace ntp::train
