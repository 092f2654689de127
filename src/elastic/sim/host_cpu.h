// The CPU of the host the members run on, for the simulator: work queued on `cores` cores, each
// piece on the core that is free first. With cores == 0 every member has a CPU of its own (a
// cluster: one process per GPU on hosts with cores to spare), so work only takes its own time.
// On one small host (control_plane_bench: hundreds of member threads on two cores) the members'
// own work is what a store model alone misses.
#pragma once

#include <algorithm>
#include <functional>
#include <utility>
#include <vector>

#include "elastic/sim/event_loop.h"

namespace ntp::elastic::sim {

class HostCpu {
 public:
  HostCpu(EventLoop& loop, int cores) : loop_(loop), free_at_(static_cast<size_t>(cores)) {}

  // Runs `then` once `work` of CPU was done for it.
  void run(Duration work, std::function<void()> then) {
    if (free_at_.empty()) {
      loop_.after(work, std::move(then));
      return;
    }
    const auto first = std::min_element(free_at_.begin(), free_at_.end());
    *first = std::max(*first, loop_.now()) + work;
    loop_.at(*first, std::move(then));
  }

 private:
  EventLoop& loop_;
  std::vector<Time> free_at_;  // per core: when it finishes what it has taken
};

}  // namespace ntp::elastic::sim
