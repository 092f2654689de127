#include "checkpoint/spread.h"

#include <algorithm>

#include "core/check.h"

namespace ntp::checkpoint {
namespace {

// FNV-1a: the same on every rank and every build (std::hash promises neither).
uint64_t key_hash(std::string_view key) {
  uint64_t h = 1469598103934665603ull;
  for (char c : key) {
    h ^= static_cast<uint8_t>(c);
    h *= 1099511628211ull;
  }
  return h;
}

int64_t parts_of(int64_t bytes, int64_t cap, const SpreadOptions& options) {
  return std::clamp<int64_t>(bytes / std::max<int64_t>(options.min_part_bytes, 1), 1,
                             std::max<int64_t>(cap, 1));
}

// Replicas with a live rank, in order, and the position of `slot`'s among them.
std::vector<int> live_replicas(const SpreadSlot& slot, int64_t* mine) {
  std::vector<int> live;
  for (size_t r = 0; r < slot.degrees.size(); ++r) {
    if (slot.degrees[r] <= 0) continue;
    if (static_cast<int>(r) == slot.replica) *mine = static_cast<int64_t>(live.size());
    live.push_back(static_cast<int>(r));
  }
  return live;
}

}  // namespace

IndexRuns sharded_share(std::string_view key, int64_t units, int64_t bytes, const SpreadSlot& slot,
                        const SpreadOptions& options) {
  int64_t mine = -1;
  const auto replicas = static_cast<int64_t>(live_replicas(slot, &mine).size());
  NTP_CHECK(mine >= 0);  // the writer's own replica is live
  if (units <= 0) return {};
  const uint64_t h = key_hash(key);
  const int64_t n = parts_of(bytes, std::min(replicas, units), options);
  // Part k goes to replica (k + offset) mod replicas: at most one part per replica.
  const auto offset = static_cast<int64_t>((h >> 32) % static_cast<uint64_t>(replicas));
  const int64_t k = ((mine - offset) % replicas + replicas) % replicas;
  if (k >= n) return {};
  const auto rotation = static_cast<int64_t>(h % static_cast<uint64_t>(units));
  const int64_t begin = units * k / n + rotation, end = units * (k + 1) / n + rotation;
  if (end <= units) return {{begin, end}};
  if (begin >= units) return {{begin - units, end - units}};
  return {{0, end - units}, {begin, units}};
}

IndexRuns replicated_share(std::string_view key, int64_t rows, int64_t bytes,
                           const SpreadSlot& slot, const SpreadOptions& options) {
  int64_t mine = -1;
  const std::vector<int> live = live_replicas(slot, &mine);
  NTP_CHECK(mine >= 0);
  int64_t writers = 0, me = -1;
  for (int r : live) {
    if (r == slot.replica) me = writers + slot.tp_rank;
    writers += slot.degrees[static_cast<size_t>(r)];
  }
  if (rows <= 0) return {};
  const int64_t n = parts_of(bytes, std::min(writers, rows), options);
  const auto offset = static_cast<int64_t>((key_hash(key) >> 32) % static_cast<uint64_t>(writers));
  const int64_t k = ((me - offset) % writers + writers) % writers;
  if (k >= n) return {};
  return {{rows * k / n, rows * (k + 1) / n}};
}

}  // namespace ntp::checkpoint
