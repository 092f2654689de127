// EventLog: one worker's detections and decisions as JSON lines with a timestamp, in
// OUT_DIR/events/rank_<R>.jsonl (the leader's metrics file has the job-wide view: recovery events,
// docs/recovery.md). Each line is {"time": Unix seconds, "rank": R, "event": ..., more fields}:
//   step_failed   this worker's step failed (error), or its failure watch aborted it (watch)
//   agreed        the members of a new epoch (epoch, members)
//   fenced        it was declared dead while away and leaves
//   stopped       live recovery cannot go on (reason)
//   joined        a repair joined at a step
//   applied       it applied the update of a step (epoch)
//   rolled_back   it took the update of a step back (a re-formation agreed on that step)
//   restored      it loaded the state of a step from a checkpoint (ZeRO-1's fallback)
//   agreement_retry  the store did not answer during an agreement, which starts again
//   finished      its last step is done
// Thread-safe (the failure watch logs from its own thread); a line is written whole or not at all
// (one write of the line, the file opened for append).
#pragma once

#include <cstdio>
#include <mutex>
#include <string>

#include <nlohmann/json.hpp>

#include "core/non_copyable.h"

namespace ntp::train {

class EventLog : NonCopyable {
 public:
  // Logs nothing when `out_dir` is empty or the file cannot be opened.
  EventLog(const std::string& out_dir, int rank);
  ~EventLog();

  void log(const std::string& event, nlohmann::json fields = nlohmann::json::object());

 private:
  std::mutex mutex_;
  std::FILE* file_ = nullptr;
  int rank_;
};

}  // namespace ntp::train
