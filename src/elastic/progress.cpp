#include "elastic/progress.h"

#include <cstdio>
#include <cstdlib>

namespace ntp::elastic {

const char* phase_name(Phase phase) {
  switch (phase) {
    case Phase::kSetup:
      return "setup";
    case Phase::kFirstStep:
      return "first_step";
    case Phase::kStep:
      return "step";
    case Phase::kCheckpoint:
      return "checkpoint";
    case Phase::kReform:
      return "reform";
    case Phase::kJoin:
      return "join";
    case Phase::kFinished:
      return "finished";
    case Phase::kEval:
      return "eval";
  }
  return "step";
}

void Progress::mark(Phase phase, std::int64_t step) {
  phase_.store(static_cast<std::uint8_t>(phase), std::memory_order_relaxed);
  step_.store(step, std::memory_order_relaxed);
  sequence_.fetch_add(1, std::memory_order_relaxed);
}

std::string Progress::token() const {
  char text[64];
  std::snprintf(text, sizeof text, "%llu:%u:%lld",
                static_cast<unsigned long long>(sequence_.load(std::memory_order_relaxed)),
                static_cast<unsigned>(phase_.load(std::memory_order_relaxed)),
                static_cast<long long>(step_.load(std::memory_order_relaxed)));
  return text;
}

ProgressToken parse_progress(const std::string& heartbeat_value) {
  ProgressToken out;
  const size_t bar = heartbeat_value.find('|');
  if (bar == std::string::npos) {
    out.moving = heartbeat_value;
    return out;
  }
  out.moving = heartbeat_value.substr(bar + 1);
  const size_t colon = out.moving.find(':');
  if (colon != std::string::npos) {
    const unsigned code =
        static_cast<unsigned>(std::strtoul(out.moving.c_str() + colon + 1, nullptr, 10));
    if (code <= static_cast<unsigned>(Phase::kEval)) out.phase = static_cast<Phase>(code);
  }
  // Only the sequence number is progress; the phase and step come with it.
  out.moving = out.moving.substr(0, colon);
  return out;
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
  if (!value) {
    if (it != seen_.end()) it->second.since = now;
    return false;
  }
  const ProgressToken token = parse_progress(*value);
  if (it == seen_.end() || it->second.moving != token.moving) {
    seen_[id] = Seen{*value, token.moving, now};
    return false;
  }
  it->second.value = *value;
  return now - it->second.since >= phase_allowance(token.phase, hang_detect_);
}

}  // namespace ntp::elastic
