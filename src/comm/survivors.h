// Agreeing on who survived, so that a new communicator can be formed among the survivors.
//
// Members are named by stable ids (the launcher's NTP_RANK), not by ranks of a communicator,
// because ranks change at every rebuild. After an operation failed with kUnavailable, every
// surviving process calls agree_on_survivors with the group name, the next epoch number, its id
// and the ids of the failed group. Each survivor announces itself in the store; the first to
// arrive becomes the decider. It publishes the member list once every candidate has either
// announced or is known dead, or when `window` has passed. A candidate is known dead when it
// runs a Heartbeat and its counter has not moved for `stale_after` (a SIGKILLed or SIGSTOPped
// process stops beating; clocks of different machines are never compared), or when
// `known_dead` says so (the launcher reaped it). Without heartbeats
// (stale_after == 0) the decider waits the whole window for a candidate that never announces.
//
// Everyone returns the same list (ids, increasing) and its rank in the new group. A process that
// announces after the list was published is not a member and gets kAborted. If the decider dies
// before publishing, the others get kUnavailable after about window + stale_after; retry with
// epoch + 1.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "comm/store.h"
#include "core/non_copyable.h"
#include "core/status.h"

namespace ntp::comm {

struct Membership {
  int epoch = 0;
  std::vector<int> members;  // ids, increasing
  int new_rank = -1;         // index of the caller in `members`
  int size() const { return static_cast<int>(members.size()); }
};

struct AgreementOptions {
  // Longest the decider waits for a candidate that neither announces nor is known dead. Make it
  // longer than the communicator timeout: survivors that are not neighbours of the dead peer
  // only notice the failure when their operation times out.
  std::chrono::milliseconds window{5000};
  // A candidate whose heartbeat did not move for this long is dead. 0 = do not use heartbeats.
  std::chrono::milliseconds stale_after{0};
  // Optional: true when `id` is known to be gone without waiting for its heartbeat (for example
  // the launcher's exit notice, comm/exit_notice.h). Called by the decider while it waits.
  std::function<bool(int id)> known_dead;
};

Result<Membership> agree_on_survivors(Store& store, const std::string& group, int epoch, int my_id,
                                      const std::vector<int>& candidates,
                                      const AgreementOptions& options);

// Writes a new value (a counter) to the store key "hb/<group>/<id>" every `interval` from a
// background thread, so that others can tell this process is alive. With a `payload`, each value
// is "<counter>|<payload()>": the trainer sends its training thread's progress
// (elastic/progress.h), so that a watcher can tell a live process whose work is stuck. Stops (and
// joins) on destruction.
class Heartbeat : NonCopyable {
 public:
  Heartbeat(std::shared_ptr<Store> store, const std::string& group, int id,
            std::chrono::milliseconds interval, std::function<std::string()> payload = {});
  ~Heartbeat();

  static std::string key(const std::string& group, int id);

  // Beats now rather than at the end of the current interval (then every `interval` again): for a
  // payload that just changed in a way watchers must see at once (the trainer leaving its setup).
  void beat_now();

 private:
  std::shared_ptr<Store> store_;
  std::string key_;
  std::chrono::milliseconds interval_;
  std::function<std::string()> payload_;
  std::mutex mutex_;
  std::condition_variable wake_;
  bool stop_ = false, beat_now_ = false;  // under mutex_
  std::thread thread_;
};

}  // namespace ntp::comm
