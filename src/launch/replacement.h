// Replacement and restart: what `ntp launch` does with a slot whose worker failed or was fenced.
//
// * replace_failed (--replace-failed N): a fresh worker for the slot (NTP_RESTART_COUNT + 1)
//   after a backoff of 0.5 s doubling per replacement of the slot, at most 8 s, at most N times
//   per slot. It asks to join through the store, so it starts only once the store answers; while
//   it does not, the replacement is held and the store tried every second, for at most 10 min.
// * restart_on_failure (--restart-on-failure): the failed slots are lost for the run, the others
//   are stopped and started again with the next attempt number (NTP_ATTEMPT) and every lost rank
//   (NTP_LOST_RANKS), at most max_restarts times.
#pragma once

#include <chrono>
#include <string>
#include <vector>

#include "launch/worker_slot.h"

namespace ntp::launch {

constexpr std::chrono::milliseconds kStoreRetry{1000};
constexpr std::chrono::seconds kStoreWaitLimit{600};

// The pause before a slot's replacement number `replacements` + 1.
std::chrono::milliseconds replace_backoff(int replacements);

// replace_failed: schedules the replacement of `slot` (kWaiting) or, with the limit spent, leaves
// it done. Returns the line the launcher says.
std::string schedule_replacement(Slot& slot, bool failed, int limit);

// A held replacement whose store probe failed at `now`: retried in kStoreRetry, or given up after
// kStoreWaitLimit (the slot is done). Returns the line to say, or empty.
std::string hold_replacement(Slot& slot, std::chrono::steady_clock::time_point now);

// restart_on_failure bookkeeping.
class JobRestarts {
 public:
  explicit JobRestarts(int max_restarts) : max_restarts_(max_restarts) {}

  // The failed slots are lost. Returns why the launcher gives up (empty: restart the others,
  // whose identity now carries the next attempt and the lost ranks).
  std::string after_failure(std::vector<Slot>& slots, const std::vector<Slot*>& failed);
  int attempt() const { return attempt_; }
  const std::vector<int>& lost_ranks() const { return lost_ranks_; }

 private:
  int max_restarts_;
  int attempt_ = 0;              // restarts of the job so far
  std::vector<int> lost_ranks_;  // ranks of failed slots, ascending
};

}  // namespace ntp::launch
