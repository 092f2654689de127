// Waiting in a test for what another process does (a step file grows, a metrics line appears).
#pragma once

#include <chrono>
#include <functional>
#include <thread>

namespace ntp::testing {

// Polls `ready` every `poll` until it holds (true) or `limit` has passed (false).
inline bool wait_until(const std::function<bool()>& ready, std::chrono::milliseconds limit,
                       std::chrono::milliseconds poll = std::chrono::milliseconds(20)) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  while (!ready()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(poll);
  }
  return true;
}

}  // namespace ntp::testing
