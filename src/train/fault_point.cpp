#include "train/fault_point.h"

#include <atomic>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "core/wall_clock.h"

namespace ntp::train {
namespace {

std::atomic<int64_t> current_step{-1};

struct Target {
  std::string phase;
  int64_t step = -1;
};

const Target& target() {
  static const Target t = [] {
    Target out;
    const char* text = std::getenv("NTP_FAULT_POINT");
    const char* rank = std::getenv("NTP_RANK");
    if (text == nullptr || rank == nullptr) return out;
    const std::string s(text);  // PHASE:STEP:RANK
    const size_t a = s.find(':'), b = s.find(':', a + 1);
    if (a == std::string::npos || b == std::string::npos || s.substr(b + 1) != rank) return out;
    out.phase = s.substr(0, a);
    out.step = std::strtoll(s.c_str() + a + 1, nullptr, 10);
    return out;
  }();
  return t;
}

}  // namespace

void set_fault_step(int64_t step) { current_step.store(step, std::memory_order_relaxed); }

void fault_point(const char* phase) {
  const Target& t = target();
  if (t.step < 0 || t.step != current_step.load(std::memory_order_relaxed)) return;
  if (t.phase != phase) return;
  // The moment of the fault, on the same clock as the metrics' "time" fields (benchmarks put
  // detection and recovery on one timeline with it).
  std::fprintf(stderr, "ntp fault point: SIGKILL in %s of step %lld at %.6f\n", phase,
               static_cast<long long>(t.step), unix_seconds());
  std::fflush(stderr);
  std::raise(SIGKILL);
}

}  // namespace ntp::train
