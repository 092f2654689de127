// Live recovery's undo copy: the state a worker's job held before its last optimizer update, so
// that an update some members applied and others did not (or a ZeRO-1 update that did not
// complete) is taken back together with the step it claims (docs/recovery.md, "commit").
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "train/job.h"

namespace ntp::train {

// Every buffer an optimizer update changes: the parameters' values and, replicated, both moments
// per parameter; with ZeRO-1 the owned chunks' master weights and moments, and the copies of the
// previous DP member's moments (they change with its update).
std::vector<std::span<float>> updated_state(Job& job);

int64_t optimizer_steps(const Job& job);

// The state before the last optimizer update: a step that some survivors applied and others did
// not is taken back, so that every survivor continues from the same step. It belongs to the job
// it was saved from (an update in a new job saves it anew).
class UndoLog {
 public:
  void save(Job& job) {
    const std::vector<std::span<float>> state = updated_state(job);
    saved_.resize(state.size());
    for (size_t i = 0; i < state.size(); ++i) saved_[i].assign(state[i].begin(), state[i].end());
    steps_ = optimizer_steps(job);
    of_ = &job;
  }
  // Whether `job`'s last update can be taken back.
  bool holds(const Job& job) const { return of_ == &job; }
  void restore(Job& job) {
    NTP_CHECK(of_ == &job);
    const std::vector<std::span<float>> state = updated_state(job);
    NTP_CHECK(state.size() == saved_.size());
    for (size_t i = 0; i < state.size(); ++i) {
      NTP_CHECK(state[i].size() == saved_[i].size());
      std::copy(saved_[i].begin(), saved_[i].end(), state[i].begin());
    }
    if (job.adamw) job.adamw->set_steps_taken(steps_);
    if (job.sharded) job.sharded->set_steps_taken(steps_);
    of_ = nullptr;  // one update back, no more
  }

 private:
  std::vector<std::vector<float>> saved_;
  int64_t steps_ = 0;
  const Job* of_ = nullptr;
};

}  // namespace ntp::train
