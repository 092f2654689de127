// Agreeing on who survived, so that a new communicator can be formed among the survivors.
//
// After an operation failed with kUnavailable, every surviving process calls agree_on_survivors
// with the failed group's name, the next epoch number, and its rank in the failed group. Each
// survivor announces itself in the store; the first to arrive becomes the decider: it waits until
// all `old_size` ranks announced or `window` passed, then publishes the member list. Everyone
// returns the same list (old ranks, increasing) and its rank in the new group. A process that
// announces after the list was published is not a member and gets kAborted; it must exit or wait
// to be re-admitted by a later epoch. If the decider dies before publishing, the others get
// kUnavailable after `window` plus a margin; retry with epoch + 1.
#pragma once

#include <chrono>
#include <string>
#include <vector>

#include "comm/store.h"
#include "core/status.h"

namespace ntp::comm {

struct Membership {
  int epoch = 0;
  std::vector<int> members;  // ranks in the previous group, increasing
  int new_rank = -1;         // index of the caller in `members`
  int size() const { return static_cast<int>(members.size()); }
};

Result<Membership> agree_on_survivors(Store& store, const std::string& group, int epoch,
                                      int old_rank, int old_size, std::chrono::milliseconds window);

}  // namespace ntp::comm
