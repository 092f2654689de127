// Slowing a worker down for `ntp launch --inject slow:...`: a thread of the launcher's own
// duty-cycles SIGSTOP/SIGCONT on the worker's process group, so that in every period (20 ms) the
// group runs for factor x period and is stopped for the rest. A CPU-bound worker then runs at
// about `factor` of its speed (docs/launch.md, "Slowing a worker", says why not a cgroup quota).
//
// Contract: after stop() (or the destructor) the group is left running (SIGCONT) and no signal
// of the cycle is sent any more. The owner stops the cycle before the group's leader is reaped,
// so a signal never reaches a process that reused its number.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>

#include "core/non_copyable.h"

namespace ntp::launch {

class DutyCycle : NonCopyable {
 public:
  static constexpr std::chrono::milliseconds kPeriod{20};

  // factor in (0, 1]; at 1 nothing is ever stopped.
  DutyCycle(pid_t group, double factor, std::chrono::microseconds period = kPeriod);
  ~DutyCycle() { stop(); }

  void stop();

 private:
  void cycle();

  const pid_t group_;
  const std::chrono::microseconds run_;
  const std::chrono::microseconds stopped_;
  std::mutex mutex_;
  std::condition_variable wake_;
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace ntp::launch
