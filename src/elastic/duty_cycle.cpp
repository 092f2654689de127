#include "elastic/duty_cycle.h"

#include <signal.h>

#include <algorithm>

namespace ntp::elastic {

DutyCycle::DutyCycle(pid_t group, double factor, std::chrono::microseconds period)
    : group_(group),
      run_(std::chrono::microseconds(static_cast<long long>(static_cast<double>(period.count()) *
                                                            std::clamp(factor, 0.0, 1.0)))),
      stopped_(period - run_) {
  if (stopped_.count() > 0) thread_ = std::thread([this] { cycle(); });
}

void DutyCycle::cycle() {
  // Absolute deadlines, so that the time spent signalling does not stretch the period.
  auto next = std::chrono::steady_clock::now();
  std::unique_lock<std::mutex> lock(mutex_);
  while (!stopping_) {
    next += run_;
    if (wake_.wait_until(lock, next, [this] { return stopping_; })) break;
    ::killpg(group_, SIGSTOP);
    next += stopped_;
    if (wake_.wait_until(lock, next, [this] { return stopping_; })) break;
    ::killpg(group_, SIGCONT);
  }
}

void DutyCycle::stop() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (stopping_) return;
    stopping_ = true;
  }
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
  ::killpg(group_, SIGCONT);
}

}  // namespace ntp::elastic
