#include "model/unit_lists.h"

#include <numeric>
#include <string>
#include <utility>

namespace ntp::model {

std::vector<int64_t> all_units(int64_t n) {
  std::vector<int64_t> v(static_cast<size_t>(n));
  std::iota(v.begin(), v.end(), int64_t{0});
  return v;
}

std::vector<int64_t> shuffled_units(int64_t n, Rng& rng) {
  std::vector<int64_t> v = all_units(n);
  for (int64_t i = n - 1; i > 0; --i) {
    const auto j = static_cast<int64_t>(rng.below(static_cast<uint64_t>(i + 1)));
    std::swap(v[static_cast<size_t>(i)], v[static_cast<size_t>(j)]);
  }
  return v;
}

std::vector<std::vector<int64_t>> deal_units(const std::vector<int64_t>& order, int degree) {
  std::vector<std::vector<int64_t>> out(static_cast<size_t>(degree));
  const int64_t n = static_cast<int64_t>(order.size());
  for (int r = 0; r < degree; ++r) {
    const int64_t begin = n * r / degree, end = n * (r + 1) / degree;
    out[static_cast<size_t>(r)].assign(order.begin() + begin, order.begin() + end);
  }
  return out;
}

Status check_unit_space(const char* space, int64_t count,
                        const std::vector<const std::vector<int64_t>*>& lists, bool require_all) {
  std::vector<int> seen(static_cast<size_t>(count), 0);
  for (const auto* list : lists) {
    for (int64_t u : *list) {
      if (u < 0 || u >= count) {
        return invalid_argument(std::string(space) + " unit " + std::to_string(u) +
                                " is out of range [0, " + std::to_string(count) + ")");
      }
      if (++seen[static_cast<size_t>(u)] > 1) {
        return invalid_argument(std::string(space) + " unit " + std::to_string(u) +
                                " is assigned more than once");
      }
    }
  }
  if (require_all) {
    for (int64_t u = 0; u < count; ++u) {
      if (seen[static_cast<size_t>(u)] == 0) {
        return invalid_argument(std::string(space) + " unit " + std::to_string(u) +
                                " is assigned to no rank");
      }
    }
  }
  return ok_status();
}

}  // namespace ntp::model
