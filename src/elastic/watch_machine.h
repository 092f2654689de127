// The failure watch's rules as a machine (elastic/task.h): one round of each of its two loops,
// awaiting its store operations instead of doing them. The runtime's FailureWatch
// (elastic/failure_watch.h) runs the rounds on its two threads, between its arm and disarm; the
// simulator (elastic/sim/) schedules them in virtual time. What the rounds look at, and why, is
// described in elastic/failure_watch.h.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "comm/stream.h"
#include "elastic/progress.h"
#include "elastic/task.h"

namespace ntp::elastic {

struct WatchedEpoch {
  std::string group;  // the job's store namespace ("train/a<attempt>")
  int epoch = 0;
  int me = 0;                             // this worker's id (its global rank)
  std::vector<int> members;               // ids, increasing
  std::vector<std::string> incarnations;  // [id]: as the launcher names it (a snapshot)
  std::function<void(const std::string& reason)> abort;
};

// How long one read of the event streams blocks when nothing happens: a wake (arm, stop) or a
// notice ends it sooner, so this only sets the idle cost (0.5 reads a second).
inline constexpr std::chrono::milliseconds kNoticeBlock{2000};

// The members next to `me` in the ring of `members` (none when alone).
std::vector<int> ring_neighbours(const std::vector<int>& members, int me);

// The abort's reason for a neighbour taken as still: "rank 9 made no progress: <why>".
std::string still_reason(int id, const std::string& why);

// The notice loop: blocking reads of the launcher's and the job's event streams. Its state (the
// streams' cursors, what was read) lives across epochs: an epoch armed later still sees the
// notices that arrived before it.
class NoticeMachine {
 public:
  explicit NoticeMachine(IoSlot& io) : io_(io) {}

  // One round for the armed epoch `e` (`new_epoch`: its first round, which first answers from
  // what was read before). The reason to abort `e`, or empty. A store that did not answer costs
  // a back-off of `retry`.
  Task<std::string> round(const WatchedEpoch& e, bool new_epoch, std::chrono::milliseconds retry);
  // The join notices read so far in the last armed group's events, each counted once.
  std::int64_t join_notices() const { return join_notices_; }

 private:
  void remember(const comm::StreamEvent& event);
  std::string known_notice(const WatchedEpoch& e) const;

  IoSlot& io_;
  std::vector<comm::StreamCursor> cursors_;      // the launcher's events, then the group's
  std::map<int, std::set<std::string>> exited_;  // rank -> incarnations reported gone
  std::set<int> failed_epochs_;
  std::int64_t join_notices_ = 0;
};

// The liveness loop: every `poll`, one look at the two ring neighbours' heartbeats and at this
// worker's own silent record.
class LivenessMachine {
 public:
  LivenessMachine(IoSlot& io, std::chrono::milliseconds poll, std::chrono::milliseconds hang_detect,
                  const Progress* own_progress)
      : io_(io),
        poll_(poll),
        hang_detect_(hang_detect),
        own_progress_(own_progress),
        stillness_(hang_detect) {}

  struct Look {
    std::optional<int> still;  // a neighbour whose progress stood still: recorded silent
    std::string why;           // why it was taken as still (Stillness::verdict)
    bool fenced = false;       // this worker's own progress was recorded silent by a watcher
  };
  // One look for the armed epoch `e` (`new_epoch`: every neighbour's stillness starts afresh).
  // A still neighbour's silent record is written before the round returns; the caller then aborts
  // the epoch and posts its failure notice (post_failure, elastic/agreement_machine.h).
  Task<Look> round(const WatchedEpoch& e, bool new_epoch);

 private:
  IoSlot& io_;
  std::chrono::milliseconds poll_;
  std::chrono::milliseconds hang_detect_;  // <= 0: no progress checks (tests of the notices)
  const Progress* own_progress_;
  Stillness stillness_;
};

}  // namespace ntp::elastic
