// Wall-clock time as Unix seconds: the timestamps of metrics, event logs and fault points, so
// that lines written by several processes on one host fall on one timeline.
#pragma once

#include <chrono>

namespace ntp {

inline double unix_seconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

}  // namespace ntp
