#include "launch/replacement.h"

#include <algorithm>
#include <cstdio>

namespace ntp::launch {

std::chrono::milliseconds replace_backoff(int replacements) {
  return std::chrono::milliseconds(500 << std::min(replacements, 4));
}

std::string schedule_replacement(Slot& slot, bool failed, int limit) {
  const std::string what = failed ? "failed" : "was fenced out of the job";
  if (slot.replacements >= limit) {
    return "rank " + std::to_string(slot.id.rank) + " " + what +
           "; not replaced: --replace-failed " + std::to_string(limit) + " replacements used";
  }
  const std::chrono::milliseconds pause = replace_backoff(slot.replacements);
  slot.state = SlotState::kWaiting;
  slot.replace_at = std::chrono::steady_clock::now() + pause;
  slot.held_since.reset();
  char text[64];
  std::snprintf(text, sizeof(text), "%.1f s", static_cast<double>(pause.count()) / 1000.0);
  return "rank " + std::to_string(slot.id.rank) + " " + what + ": replacing it in " + text +
         " (replacement " + std::to_string(slot.replacements + 1) + " of " + std::to_string(limit) +
         ")";
}

std::string hold_replacement(Slot& slot, std::chrono::steady_clock::time_point now) {
  slot.replace_at = now + kStoreRetry;
  if (!slot.held_since) {
    slot.held_since = now;
    return "the store does not answer: holding the replacement of rank " +
           std::to_string(slot.id.rank) + " until it does";
  }
  if (now - *slot.held_since > kStoreWaitLimit) {
    slot.state = SlotState::kDone;
    return "the store did not answer for " + std::to_string(kStoreWaitLimit.count()) + " s: rank " +
           std::to_string(slot.id.rank) + " is not replaced";
  }
  return "";
}

std::string JobRestarts::after_failure(std::vector<Slot>& slots, const std::vector<Slot*>& failed) {
  for (Slot* slot : failed) {
    slot->lost = true;
    lost_ranks_.push_back(slot->id.rank);
  }
  std::sort(lost_ranks_.begin(), lost_ranks_.end());
  if (attempt_ >= max_restarts_) {
    return "giving up: the job failed after " + std::to_string(attempt_) + " restart" +
           (attempt_ == 1 ? "" : "s") + " (--max-restarts " + std::to_string(max_restarts_) + ")";
  }
  if (std::all_of(slots.begin(), slots.end(), [](const Slot& s) { return s.lost; })) {
    return "giving up: every slot of this node has failed";
  }
  ++attempt_;
  for (Slot& slot : slots) {
    slot.id.attempt = attempt_;
    slot.id.lost_ranks = lost_ranks_;
  }
  return "";
}

}  // namespace ntp::launch
