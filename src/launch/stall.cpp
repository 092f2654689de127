#include "launch/stall.h"

#include <chrono>
#include <cstdio>
#include <string>
#include <thread>

#include "core/wall_clock.h"

namespace ntp::launch {

std::optional<int64_t> stall_step_from_env(const EnvLookup& env) {
  const std::optional<std::string> value = env("NTP_STALL_AT");
  if (!value) return std::nullopt;
  try {
    std::size_t used = 0;
    const long long step = std::stoll(*value, &used);
    if (used == value->size() && step >= 0) return step;
  } catch (const std::exception&) {
  }
  std::fprintf(stderr, "NTP_STALL_AT='%s' is not a step >= 0: ignored\n", value->c_str());
  return std::nullopt;
}

void stall_if_asked(int64_t step) {
  static const std::optional<int64_t> stall_at = stall_step_from_env(process_env());
  if (!stall_at || step < *stall_at) return;
  // The moment, on the metrics' clock (tests measure the detection from it).
  std::fprintf(stderr, "stalling the training thread at step %lld (NTP_STALL_AT) at %.6f\n",
               static_cast<long long>(step), unix_seconds());
  std::fflush(stderr);
  for (;;) std::this_thread::sleep_for(std::chrono::seconds(1));
}

}  // namespace ntp::launch
