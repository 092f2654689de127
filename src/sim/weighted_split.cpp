#include "sim/weighted_split.h"

#include <algorithm>
#include <cmath>

#include "core/check.h"

namespace ntp::sim {

namespace {

// A rank of speed w fits floor(T w) units in time T; the tolerance keeps T = m / w (a candidate
// below) from losing its m-th unit to rounding.
std::int64_t fits(double t, double w) {
  return static_cast<std::int64_t>(std::floor(t * w + 1e-9));
}

std::int64_t capacity(double t, int fast, const std::vector<double>& slow) {
  std::int64_t n = static_cast<std::int64_t>(fast) * fits(t, 1.0);
  for (double w : slow) n += fits(t, w);
  return n;
}

}  // namespace

double weighted_split_time(std::int64_t units, int fast, const std::vector<double>& slow) {
  NTP_CHECK(fast >= 0 && fast + static_cast<int>(slow.size()) > 0);
  if (units <= 0) return 0.0;
  double total = fast;
  for (double w : slow) {
    NTP_CHECK(w > 0 && w <= 1);
    total += w;
  }
  // The least whole n with room for every unit: T lies in (n - 1, n]. capacity(t) <= t x total,
  // so n starts at or below it (floor of the continuous optimum) and steps up a few times.
  std::int64_t n =
      std::max<std::int64_t>(1, static_cast<std::int64_t>(static_cast<double>(units) / total));
  while (capacity(static_cast<double>(n), fast, slow) < units) ++n;
  // Inside (n - 1, n) the speed-1 ranks hold n - 1 units each, so only a slow rank's step
  // T = m / w can reach `units` earlier.
  double best = static_cast<double>(n);
  for (double w : slow) {
    for (std::int64_t m = fits(static_cast<double>(n - 1), w) + 1;
         static_cast<double>(m) / w < best; ++m) {
      const double t = static_cast<double>(m) / w;
      if (t > static_cast<double>(n - 1) && capacity(t, fast, slow) >= units) best = t;
    }
  }
  return best;
}

}  // namespace ntp::sim
