// FailureWatch: makes every survivor of a job learn of a fault within a bounded time, whatever
// its pending operation is waiting for. The job has one watch (the comm-level demo keeps its own
// comm::AbortWatch for the comm tests).
//
// A background thread watches the armed membership epoch, every `poll`, for three signs:
//   - a failure notice "<group>/fail/<epoch>" (elastic/agreement.h): written by any member whose
//     step failed, so one rank's connection error reaches all others;
//   - the launcher's exit notice for a member's current incarnation (comm/exit_notice.h);
//   - a hung member: the progress of one of this worker's two ring neighbours among the members
//     (the training thread's progress carried in its heartbeat, elastic/progress.h) has stood
//     still for its phase's allowance: a SIGSTOPped or dead process, or a live process whose
//     training thread is stuck. The watcher records the still value under "<group>/silent/<id>"
//     (still_silent) and writes the failure notice. Each member watches two neighbours, so the
//     store load per worker does not grow with the job.
// On the first sign it calls the epoch's `abort` once (the trainer aborts every communicator of
// the epoch, and cancels a rendezvous in progress).
// While armed, it also checks every 0.5 s whether this worker itself was recorded silent at its
// current progress: its training thread is stuck and the others have gone on without it, so the
// process leaves (`on_fenced`, which exits) instead of lingering as a zombie member.
//
// Store I/O runs without the watch's lock held: arm() and disarm() never wait for a slow store.
// Contract: arm() before the first operation of an epoch, disarm() before its communicators are
// destroyed; abort is never called outside arm..disarm. Thread-safe.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "comm/store.h"
#include "elastic/progress.h"

namespace ntp::elastic {

struct WatchedEpoch {
  std::string group;  // the job's store namespace ("train/a<attempt>")
  int epoch = 0;
  int me = 0;                             // this worker's id (its global rank)
  std::vector<int> members;               // ids, increasing
  std::vector<std::string> incarnations;  // [id]: as the launcher names it (a snapshot)
  std::function<void(const std::string& reason)> abort;
};

class FailureWatch {
 public:
  FailureWatch(std::shared_ptr<comm::Store> store, std::chrono::milliseconds poll,
               std::chrono::milliseconds hang_detect, const Progress* own_progress = nullptr,
               std::function<void()> on_fenced = {});
  ~FailureWatch();
  FailureWatch(const FailureWatch&) = delete;
  FailureWatch& operator=(const FailureWatch&) = delete;

  void arm(WatchedEpoch epoch);
  void disarm();

 private:
  void run();
  // One look at the store for `e`; the reason to abort, or empty.
  std::string check(const WatchedEpoch& e);
  bool fenced_while_stuck(const WatchedEpoch& e);

  std::shared_ptr<comm::Store> store_;
  std::chrono::milliseconds poll_;
  std::chrono::milliseconds hang_detect_;  // <= 0: no progress checks (tests of the notices)
  const Progress* own_progress_;
  std::function<void()> on_fenced_;
  std::mutex mutex_;
  std::condition_variable wake_;
  bool stop_ = false;
  bool armed_ = false;
  bool fired_ = false;
  std::uint64_t generation_ = 0;  // raised by every arm/disarm: a check of an old epoch is void
  WatchedEpoch current_;
  // Touched by the watch thread only.
  std::int64_t exits_seen_ = -1;
  std::uint64_t checked_generation_ = 0;
  Stillness stillness_;
  int polls_ = 0;
  std::thread thread_;
};

}  // namespace ntp::elastic
