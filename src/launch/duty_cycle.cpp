#include "launch/duty_cycle.h"

#include <pthread.h>
#include <sched.h>
#include <signal.h>

#include <algorithm>

namespace ntp::launch {

DutyCycle::DutyCycle(pid_t group, double factor, std::chrono::microseconds period)
    : group_(group),
      run_(std::chrono::microseconds(static_cast<long long>(static_cast<double>(period.count()) *
                                                            std::clamp(factor, 0.0, 1.0)))),
      stopped_(period - run_) {
  if (stopped_.count() <= 0) return;
  thread_ = std::thread([this] { cycle(); });
  // Timely wake-ups keep the phases near their length on a busy machine: the cycle thread
  // sleeps nearly all the time, so a real-time priority costs the others nothing. Without the
  // privilege it runs at normal priority and its phases stretch with the wake-up latency.
  sched_param param{};
  param.sched_priority = 1;
  (void)::pthread_setschedparam(thread_.native_handle(), SCHED_FIFO, &param);
}

void DutyCycle::cycle() {
  // Each phase is timed from the signal that began it, so a late wake-up (a loaded machine)
  // stretches that phase only; absolute deadlines would make the next phases catch up by
  // shrinking to nothing, and the stopped share with them.
  std::unique_lock<std::mutex> lock(mutex_);
  while (!stopping_) {
    if (wake_.wait_for(lock, run_, [this] { return stopping_; })) break;
    ::killpg(group_, SIGSTOP);
    if (wake_.wait_for(lock, stopped_, [this] { return stopping_; })) break;
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

}  // namespace ntp::launch
