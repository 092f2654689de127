// FailureWatch: makes every survivor of a job learn of a fault within a bounded time, whatever
// its pending operation is waiting for. The job has one watch (the comm-level demo keeps its own
// comm::AbortWatch for the comm tests).
//
// It watches the armed membership epoch for three signs:
//   - a failure notice for the epoch (post_failure_notice, elastic/agreement.h): posted by any
//     member whose step failed, so one rank's connection error reaches all others;
//   - the launcher's exit notice for a member's current incarnation (comm/exit_notice.h);
//   - a hung member: the progress of one of this worker's two ring neighbours among the members
//     (the training thread's progress carried in its heartbeat, elastic/progress.h) has stood
//     still for its phase's allowance: a SIGSTOPped or dead process, or a live process whose
//     training thread is stuck. The watcher records the still value under "<group>/silent/<id>"
//     (still_silent) and posts the failure notice.
// The rounds of its two loops are machines (elastic/watch_machine.h) that this class drives on
// two threads, so that the store load per worker does not grow with the job:
//   - the notice thread blocks on the store's event streams (comm/stream.h: the launcher's
//     "launch/events" and the job's "<group>/events"), so one notice reaches every watch in one
//     round trip; it reads nothing else, and re-issues its read every `kNoticeBlock` (2 s) when
//     nothing happens. Every notice read is remembered, so an epoch armed later still sees the
//     notices that arrived before it (an exit during the re-formation).
//   - the liveness thread reads, every `poll`, the two neighbours' heartbeats and this worker's
//     own silent record in one get_many; the record tells a worker whose training thread is stuck
//     that the others have gone on without it, and it leaves (`on_fenced`, which exits) instead
//     of lingering as a zombie member.
// Per member that is 1/poll + 0.5 store operations a second, plus its heartbeat's own writes.
// The notice thread also counts the job's join notices (join_notices): the leader's look for
// repairs at a step boundary costs no store I/O while none arrives (train/admission.h).
// On the first sign it calls the epoch's `abort` once (the trainer aborts every communicator of
// the epoch, and cancels a rendezvous in progress).
//
// Store I/O runs without the watch's lock held: arm() and disarm() never wait for a slow store.
// Contract: arm() before the first operation of an epoch, disarm() before its communicators are
// destroyed; abort is never called outside arm..disarm. Thread-safe.
#pragma once

#include <atomic>
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
#include "core/non_copyable.h"
#include "elastic/progress.h"
#include "elastic/store_driver.h"
#include "elastic/watch_machine.h"

namespace ntp::elastic {

class FailureWatch : NonCopyable {
 public:
  FailureWatch(std::shared_ptr<comm::Store> store, std::chrono::milliseconds poll,
               std::chrono::milliseconds hang_detect, const Progress* own_progress = nullptr,
               std::function<void()> on_fenced = {});
  ~FailureWatch();

  void arm(WatchedEpoch epoch);
  void disarm();
  // The join notices (post_join_notice) read so far in the job's events of the last armed
  // group: each one counted once, from the stream's start. Read while armed; any thread.
  std::int64_t join_notices() const { return join_notices_.load(); }

 private:
  void notice_thread();
  void liveness_thread();
  // What a watch thread looks at once: the armed epoch (a copy: the store is read without the
  // lock), its generation, and whether the thread's previous look was at another generation.
  struct EpochLook {
    WatchedEpoch epoch;
    std::uint64_t generation = 0;
    bool new_epoch = false;
  };
  // Waits under `lock` until armed; false (still locked) when stopping. Else fills `look` from the
  // armed epoch and returns true with `lock` released: the thread looks, then locks it again.
  bool next_look(std::unique_lock<std::mutex>& lock, EpochLook& look);
  // Calls the abort of `generation`'s epoch with `reason`, unless it fired already or is gone.
  void fire(std::uint64_t generation, const std::string& reason);

  std::shared_ptr<comm::Store> store_;
  std::chrono::milliseconds poll_;
  std::function<void()> on_fenced_;
  std::mutex mutex_;
  std::condition_variable wake_;
  bool stop_ = false;
  bool armed_ = false;
  bool fired_ = false;
  std::uint64_t generation_ = 0;  // raised by every arm/disarm: a look at an old epoch is void
  WatchedEpoch current_;
  // The notice thread's only (but its reader's wake()), then the liveness thread's only.
  IoSlot notice_io_;
  StoreDriver notice_driver_;
  NoticeMachine notices_machine_;
  std::atomic<std::int64_t> join_notices_{0};
  IoSlot liveness_io_;
  StoreDriver liveness_driver_;
  LivenessMachine liveness_machine_;
  std::thread notices_, liveness_;  // last: start once everything above is built
};

}  // namespace ntp::elastic
