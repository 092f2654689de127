#include "shard/load_layout.h"

#include <algorithm>
#include <numeric>

namespace ntp::shard {

std::vector<IntervalSet> deal_by_load(std::span<const double> loads,
                                      std::span<const double> speeds) {
  const auto units = static_cast<std::int64_t>(loads.size());
  const auto ranks = static_cast<int>(speeds.size());
  std::vector<std::int64_t> order(static_cast<std::size_t>(units));
  std::iota(order.begin(), order.end(), std::int64_t{0});
  std::stable_sort(order.begin(), order.end(), [&loads](std::int64_t a, std::int64_t b) {
    return loads[static_cast<std::size_t>(a)] > loads[static_cast<std::size_t>(b)];
  });
  std::vector<double> held(static_cast<std::size_t>(ranks), 0.0);
  std::vector<std::int64_t> count(static_cast<std::size_t>(ranks), 0);
  std::vector<std::vector<std::int64_t>> ids(static_cast<std::size_t>(ranks));
  int empty_ranks = ranks;
  for (std::int64_t k = 0; k < units; ++k) {
    const std::int64_t u = order[static_cast<std::size_t>(k)];
    const double load = loads[static_cast<std::size_t>(u)];
    // As many units left as ranks without one: each of those must take one of them.
    const bool only_empty = units - k <= empty_ranks;
    int best = -1;
    double best_finish = 0.0;
    for (int r = 0; r < ranks; ++r) {
      const auto i = static_cast<std::size_t>(r);
      if (only_empty && count[i] > 0) continue;
      const double finish = (held[i] + load) / speeds[i];
      if (best < 0 || finish < best_finish) {
        best = r;
        best_finish = finish;
      }
    }
    const auto b = static_cast<std::size_t>(best);
    if (count[b] == 0) --empty_ranks;
    held[b] += load;
    ++count[b];
    ids[b].push_back(u);
  }
  std::vector<IntervalSet> out;
  out.reserve(static_cast<std::size_t>(ranks));
  for (std::vector<std::int64_t>& rank_ids : ids) {
    out.push_back(IntervalSet::from_ids(std::move(rank_ids)));
  }
  return out;
}

double load_imbalance(const std::vector<IntervalSet>& units, std::span<const double> loads,
                      std::span<const double> speeds) {
  const double total = std::accumulate(loads.begin(), loads.end(), 0.0);
  const double speed = std::accumulate(speeds.begin(), speeds.end(), 0.0);
  if (total <= 0.0) return 1.0;
  double busiest = 0.0;
  for (std::size_t r = 0; r < units.size(); ++r) {
    double load = 0.0;
    for (std::int64_t u : units[r].ids()) load += loads[static_cast<std::size_t>(u)];
    busiest = std::max(busiest, load / speeds[r]);
  }
  return busiest / (total / speed);
}

}  // namespace ntp::shard
