#include "sim/weighted_split.h"

#include <algorithm>
#include <cmath>
#include <queue>

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

std::vector<double> speeds_of(int fast, const std::vector<double>& slow) {
  std::vector<double> speeds(static_cast<std::size_t>(fast), 1.0);
  speeds.insert(speeds.end(), slow.begin(), slow.end());
  return speeds;
}

// Whether every unit fits in time t (`spaces` sorted by cost, finest last).
bool fits_all(double t, const std::vector<UnitSpaceCost>& spaces,
              const std::vector<double>& speeds) {
  std::vector<double> left(speeds.size());
  for (std::size_t i = 0; i < speeds.size(); ++i) left[i] = t * speeds[i];
  for (std::size_t s = 0; s + 1 < spaces.size(); ++s) {
    std::priority_queue<std::pair<double, std::size_t>> most;  // (time left, rank)
    for (std::size_t i = 0; i < left.size(); ++i) most.push({left[i], i});
    for (std::int64_t u = 0; u < spaces[s].units; ++u) {
      auto [room, i] = most.top();
      most.pop();
      if (room < spaces[s].cost * (1 - 1e-12)) return false;
      left[i] = room - spaces[s].cost;
      most.push({left[i], i});
    }
  }
  // 1e-12 of a unit of slack absorbs the rounding of t x speed - costs (~1e-16 relative), so the
  // bisection lands within ~1e-12 of a unit of the exact boundary.
  const UnitSpaceCost& finest = spaces.back();
  std::int64_t room = 0;
  for (double l : left) {
    room += static_cast<std::int64_t>(std::floor(std::max(0.0, l) / finest.cost + 1e-12));
  }
  return room >= finest.units;
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

double weighted_split_time(const std::vector<UnitSpaceCost>& spaces, int fast,
                           const std::vector<double>& slow) {
  std::vector<UnitSpaceCost> sorted;
  for (const UnitSpaceCost& s : spaces) {
    NTP_CHECK(s.cost > 0);
    if (s.units > 0) sorted.push_back(s);
  }
  if (sorted.empty()) return 0.0;
  // One space: the exact split, scaled by its cost.
  if (sorted.size() == 1) return sorted[0].cost * weighted_split_time(sorted[0].units, fast, slow);
  std::sort(sorted.begin(), sorted.end(),
            [](const UnitSpaceCost& a, const UnitSpaceCost& b) { return a.cost > b.cost; });
  const std::vector<double> speeds = speeds_of(fast, slow);
  double total_speed = 0, total_cost = 0, hi = 0;
  for (double w : speeds) total_speed += w;
  for (const UnitSpaceCost& s : sorted) {
    total_cost += s.cost * static_cast<double>(s.units);
    hi += s.cost * weighted_split_time(s.units, fast, slow);  // each space on its own: feasible
  }
  double lo = total_cost / total_speed;
  if (fits_all(lo, sorted, speeds)) return lo;
  // fits_all(hi) holds: the separate splits fit side by side. Bisect to 1e-13 of T.
  for (int k = 0; k < 200 && hi - lo > 1e-13 * hi; ++k) {
    const double mid = 0.5 * (lo + hi);
    (fits_all(mid, sorted, speeds) ? hi : lo) = mid;
  }
  return hi;
}

}  // namespace ntp::sim
