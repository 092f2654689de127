#include "elastic/progress.h"

#include <algorithm>

#include <cstdio>
#include <cstdlib>

namespace ntp::elastic {

void Progress::mark(Phase phase, std::int64_t step) {
  phase_.store(static_cast<std::uint8_t>(phase), std::memory_order_relaxed);
  step_.store(step, std::memory_order_relaxed);
  sequence_.fetch_add(1, std::memory_order_relaxed);
}

void Progress::waiting(bool begins) {
  const int before = waits_.fetch_add(begins ? 1 : -1, std::memory_order_relaxed);
  if (before == (begins ? 0 : 1)) {  // the outermost wait starts or ends: read the clock
    const std::int64_t now = std::chrono::duration_cast<std::chrono::nanoseconds>(
                                 std::chrono::steady_clock::now().time_since_epoch())
                                 .count();
    if (begins) {
      wait_start_ns_ = now;
    } else {
      waited_ns_ += now - wait_start_ns_;
    }
  }
  sequence_.fetch_add(1, std::memory_order_relaxed);  // a wait that starts or ends is progress
}

std::string Progress::token() const {
  char text[80];
  std::snprintf(text, sizeof text, "%d.%llu:%u:%lld:%d", incarnation_,
                static_cast<unsigned long long>(sequence_.load(std::memory_order_relaxed)),
                static_cast<unsigned>(phase_.load(std::memory_order_relaxed)),
                static_cast<long long>(step_.load(std::memory_order_relaxed)),
                waits_.load(std::memory_order_relaxed) > 0 ? 1 : 0);
  return text;
}

ProgressToken parse_progress(const std::string& heartbeat_value) {
  ProgressToken out;
  const size_t bar = heartbeat_value.find('|');
  if (bar == std::string::npos) {
    out.beat = out.moving = heartbeat_value;
    return out;
  }
  out.beat = heartbeat_value.substr(0, bar);
  // incarnation.sequence:phase:step:waiting
  const std::string token = heartbeat_value.substr(bar + 1);
  const size_t a = token.find(':');
  const size_t b = a == std::string::npos ? a : token.find(':', a + 1);
  const size_t c = b == std::string::npos ? b : token.find(':', b + 1);
  out.moving = token.substr(0, a);
  if (a != std::string::npos) {
    const auto code = static_cast<unsigned>(std::strtoul(token.c_str() + a + 1, nullptr, 10));
    if (code <= static_cast<unsigned>(Phase::kEval)) out.phase = static_cast<Phase>(code);
  }
  out.waiting = c != std::string::npos && token.compare(c + 1, std::string::npos, "1") == 0;
  return out;
}

std::chrono::milliseconds liveness_period(std::chrono::milliseconds hang_detect) {
  return std::max(std::chrono::milliseconds(50), hang_detect / 4);
}

std::chrono::milliseconds phase_allowance(Phase phase, std::chrono::milliseconds hang_detect) {
  switch (phase) {
    case Phase::kStep:
      return hang_detect;
    case Phase::kFinished:
      return std::chrono::hours(24);  // done, not hung
    default:
      return 10 * hang_detect;
  }
}

bool Stillness::still(int id, const std::optional<std::string>& value, Clock::time_point now) {
  auto it = seen_.find(id);
  if (!value) {  // nothing known: both clocks start over
    if (it != seen_.end()) it->second.beat_since = it->second.moving_since = now;
    return false;
  }
  const ProgressToken token = parse_progress(*value);
  if (it == seen_.end()) {
    seen_[id] = Seen{*value, token.beat, token.moving, now, now};
    return false;
  }
  Seen& s = it->second;
  s.value = *value;
  if (s.beat != token.beat) s.beat = token.beat, s.beat_since = now;
  if (s.moving != token.moving) s.moving = token.moving, s.moving_since = now;
  if (token.phase == Phase::kFinished) return false;    // done, not hung
  if (now - s.beat_since >= hang_detect_) return true;  // the process stopped or died
  return !token.waiting && now - s.moving_since >= phase_allowance(token.phase, hang_detect_);
}

}  // namespace ntp::elastic
