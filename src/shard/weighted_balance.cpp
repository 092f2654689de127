#include "shard/weighted_balance.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <string>

namespace ntp::shard {
namespace {

// Every comparison of the split goes through this one expression, so the prefix step and the
// greedy steps order the values k / s identically (the result must not depend on which path
// placed a unit).
double load(std::int64_t count, double speed) { return static_cast<double>(count) / speed; }

}  // namespace

Status validate_speed(double speed, std::string_view what) {
  if (!std::isfinite(speed) || speed <= 0.0) {
    return invalid_argument(std::string(what) + " is " + std::to_string(speed) +
                            "; a speed is a relative throughput and must be finite and > 0 "
                            "(1.0 = full speed; treat a stopped device as failed instead)");
  }
  return ok_status();
}

Result<std::vector<std::int64_t>> weighted_counts(std::int64_t units,
                                                  std::span<const double> speeds,
                                                  std::span<const int> priority) {
  const std::size_t n = speeds.size();
  if (n == 0) return invalid_argument("weighted_counts needs at least one rank's speed");
  for (std::size_t i = 0; i < n; ++i) {
    NTP_RETURN_IF_ERROR(validate_speed(speeds[i], "speed of rank " + std::to_string(i)));
  }
  if (units < static_cast<std::int64_t>(n)) {
    return invalid_argument(std::to_string(units) + " units cannot give each of " +
                            std::to_string(n) + " ranks one unit; use fewer ranks or more units");
  }
  // pos[i]: where rank i stands in the tie order (smaller wins).
  std::vector<std::size_t> pos(n);
  if (priority.empty()) {
    std::iota(pos.begin(), pos.end(), std::size_t{0});
  } else {
    if (priority.size() != n) {
      return invalid_argument("priority lists " + std::to_string(priority.size()) + " ranks for " +
                              std::to_string(n) + " speeds");
    }
    std::vector<bool> seen(n, false);
    for (std::size_t p = 0; p < n; ++p) {
      const int r = priority[p];
      if (r < 0 || static_cast<std::size_t>(r) >= n || seen[static_cast<std::size_t>(r)]) {
        return invalid_argument("priority is not a permutation of the ranks 0.." +
                                std::to_string(n - 1));
      }
      seen[static_cast<std::size_t>(r)] = true;
      pos[static_cast<std::size_t>(r)] = p;
    }
  }

  // Prefix: every value k / s_i <= t for t = (units - n) / sum(s). That takes at most
  // n + t * sum(s) = units values and at least units - 2n, so the greedy below runs O(n) steps.
  // Taking *all* values <= t is a prefix of the greedy's order whatever the tie rule.
  const double total_speed = std::accumulate(speeds.begin(), speeds.end(), 0.0);
  const double t = static_cast<double>(units - static_cast<std::int64_t>(n)) / total_speed;
  std::vector<std::int64_t> counts(n);
  std::int64_t placed = 0;
  for (std::size_t i = 0; i < n; ++i) {
    std::int64_t c =
        std::max<std::int64_t>(1, static_cast<std::int64_t>(std::floor(t * speeds[i])));
    while (c > 1 && load(c, speeds[i]) > t) --c;
    while (load(c + 1, speeds[i]) <= t) ++c;
    counts[i] = c;
    placed += c;
  }
  // Rounding could overshoot by a unit on huge spaces: take back the last values in greedy order.
  while (placed > units) {
    std::size_t worst = n;
    for (std::size_t i = 0; i < n; ++i) {
      if (counts[i] <= 1) continue;
      if (worst == n || load(counts[i], speeds[i]) > load(counts[worst], speeds[worst]) ||
          (load(counts[i], speeds[i]) == load(counts[worst], speeds[worst]) && pos[i] > pos[worst]))
        worst = i;
    }
    --counts[worst];
    --placed;
  }
  // Greedy: the next unit to the rank that would finish it first, ties in priority order.
  for (; placed < units; ++placed) {
    std::size_t best = 0;
    for (std::size_t i = 1; i < n; ++i) {
      const double a = load(counts[i] + 1, speeds[i]);
      const double b = load(counts[best] + 1, speeds[best]);
      if (a < b || (a == b && pos[i] < pos[best])) best = i;
    }
    ++counts[best];
  }
  return counts;
}

double weighted_bottleneck(std::span<const std::int64_t> counts, std::span<const double> speeds) {
  double most = 0.0;
  for (std::size_t i = 0; i < counts.size() && i < speeds.size(); ++i) {
    most = std::max(most, load(counts[i], speeds[i]));
  }
  return most;
}

bool all_equal(std::span<const double> speeds) {
  return std::adjacent_find(speeds.begin(), speeds.end(), std::not_equal_to<>()) == speeds.end();
}

}  // namespace ntp::shard
