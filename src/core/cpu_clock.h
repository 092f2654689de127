// Clock readings in ns, and the calling thread's CPU time (CLOCK_THREAD_CPUTIME_ID): what a
// measurement charges to the work of one thread, not to the time the scheduler gave to others
// (kernel choices, the speed probe, a training thread's compute, the benches, the liveness
// tokens' starvation rule).
#pragma once

#include <time.h>

#include <cstdint>

namespace ntp {

// Any clock's reading in ns (CLOCK_MONOTONIC, a thread's CPU clock from pthread_getcpuclockid).
inline std::int64_t clock_ns(clockid_t clock) {
  timespec t{};
  clock_gettime(clock, &t);
  return static_cast<std::int64_t>(t.tv_sec) * 1'000'000'000 + t.tv_nsec;
}

inline std::int64_t thread_cpu_ns() { return clock_ns(CLOCK_THREAD_CPUTIME_ID); }

inline double thread_cpu_seconds() { return 1e-9 * static_cast<double>(thread_cpu_ns()); }

}  // namespace ntp
