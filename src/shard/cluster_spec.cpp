#include "shard/cluster_spec.h"

#include <algorithm>
#include <charconv>
#include <cmath>

#include "shard/weighted_balance.h"

namespace ntp::shard {
namespace {

std::string slot_name(SlotRef s) { return std::to_string(s.domain) + ":" + std::to_string(s.slot); }

Result<int> parse_int(std::string_view text) {
  int value = 0;
  const char* end = text.data() + text.size();
  auto [ptr, ec] = std::from_chars(text.data(), end, value);
  if (ec != std::errc() || ptr != end || text.empty()) {
    return invalid_argument("'" + std::string(text) + "' is not an integer");
  }
  return value;
}

Status validate_left(ClusterSpec& spec) {
  std::sort(spec.left.begin(), spec.left.end());
  for (std::size_t i = 0; i < spec.left.size(); ++i) {
    const int d = spec.left[i];
    if (d < 0 || d >= spec.domains) {
      return invalid_argument("left domain " + std::to_string(d) +
                              " is out of range; domains are 0.." +
                              std::to_string(spec.domains - 1));
    }
    if (i > 0 && spec.left[i - 1] == d) {
      return invalid_argument("left domain " + std::to_string(d) +
                              " is listed twice; list each once");
    }
  }
  if (spec.left.size() == static_cast<std::size_t>(spec.domains)) {
    return invalid_argument("every one of the " + std::to_string(spec.domains) +
                            " domains left the job; at least one replica must run");
  }
  return ok_status();
}

Status validate_unit_loads(const ClusterSpec& spec) {
  if (spec.unit_loads.empty()) return ok_status();
  if (spec.unit_loads.size() != spec.spaces.size()) {
    return invalid_argument("unit loads are given for " + std::to_string(spec.unit_loads.size()) +
                            " spaces, the model has " + std::to_string(spec.spaces.size()) +
                            "; give one list per space (an empty list = none measured)");
  }
  for (std::size_t s = 0; s < spec.spaces.size(); ++s) {
    const std::vector<double>& loads = spec.unit_loads[s];
    const UnitSpace& space = spec.spaces[s];
    if (loads.empty()) continue;
    if (space.derived() || loads.size() != static_cast<std::size_t>(space.units)) {
      return invalid_argument(space.name + " has " + std::to_string(loads.size()) +
                              " unit loads for " + std::to_string(space.units) +
                              " units; give one load per unit of a space that is not derived");
    }
    for (std::size_t u = 0; u < loads.size(); ++u) {
      if (!std::isfinite(loads[u]) || loads[u] < 0.0) {
        return invalid_argument("the load of " + space.name + " unit " + std::to_string(u) +
                                " is " + std::to_string(loads[u]) +
                                "; loads are finite and >= 0 (routed tokens)");
      }
    }
  }
  return ok_status();
}

}  // namespace

Result<std::vector<SlotRef>> parse_slot_list(std::string_view text, std::string_view flag) {
  std::vector<SlotRef> out;
  if (text.empty()) return out;
  std::size_t start = 0;
  while (start <= text.size()) {
    const std::size_t comma = std::min(text.find(',', start), text.size());
    const std::string_view item = text.substr(start, comma - start);
    const std::size_t colon = item.find(':');
    auto bad = [&](std::string_view why) {
      return invalid_argument(std::string(flag) + ": '" + std::string(item) + "' " +
                              std::string(why) +
                              "; expected DOMAIN:SLOT[,DOMAIN:SLOT...], e.g. 3:5,7:0");
    };
    if (colon == std::string_view::npos) return bad("has no ':'");
    auto domain = parse_int(item.substr(0, colon));
    auto slot = parse_int(item.substr(colon + 1));
    if (!domain.ok() || !slot.ok()) return bad("is not two integers");
    out.push_back({*domain, *slot});
    start = comma + 1;
  }
  return out;
}

std::vector<int> ClusterSpec::healthy_slots(int domain) const {
  std::vector<int> out;
  if (has_left(domain)) return out;
  out.reserve(static_cast<std::size_t>(domain_size));
  auto it = std::lower_bound(failed.begin(), failed.end(), SlotRef{domain, 0});
  for (int l = 0; l < domain_size; ++l) {
    if (it != failed.end() && it->domain == domain && it->slot == l) {
      ++it;
      continue;
    }
    out.push_back(l);
  }
  return out;
}

bool ClusterSpec::is_failed(SlotRef slot) const {
  return std::binary_search(failed.begin(), failed.end(), slot);
}

void leave_domains_without_slots(ClusterSpec& spec) {
  std::vector<std::vector<bool>> lost(static_cast<std::size_t>(std::max(spec.domains, 0)),
                                      std::vector<bool>(std::max(spec.domain_size, 0)));
  for (const SlotRef& s : spec.failed) {
    if (s.domain < 0 || s.domain >= spec.domains || s.slot < 0 || s.slot >= spec.domain_size) {
      continue;
    }
    lost[static_cast<std::size_t>(s.domain)][static_cast<std::size_t>(s.slot)] = true;
  }
  for (int d = 0; d < spec.domains; ++d) {
    const std::vector<bool>& slots = lost[static_cast<std::size_t>(d)];
    if (spec.domain_size > 0 && std::all_of(slots.begin(), slots.end(), [](bool l) { return l; }) &&
        !spec.has_left(d)) {
      spec.left.insert(std::upper_bound(spec.left.begin(), spec.left.end(), d), d);
    }
  }
}

bool ClusterSpec::has_left(int domain) const {
  return std::binary_search(left.begin(), left.end(), domain);
}

int ClusterSpec::degree(int domain) const {
  if (has_left(domain)) return 0;
  auto lo = std::lower_bound(failed.begin(), failed.end(), SlotRef{domain, 0});
  auto hi = std::lower_bound(failed.begin(), failed.end(), SlotRef{domain + 1, 0});
  return domain_size - static_cast<int>(hi - lo);
}

double ClusterSpec::speed(int domain, int slot) const {
  if (speeds.empty()) return 1.0;
  const std::vector<double>& of_domain = speeds[static_cast<std::size_t>(domain)];
  return of_domain.empty() ? 1.0 : of_domain[static_cast<std::size_t>(slot)];
}

bool ClusterSpec::has_loads(int space) const {
  return !unit_loads.empty() && !unit_loads[static_cast<std::size_t>(space)].empty();
}

bool ClusterSpec::weighted(int domain) const {
  if (speeds.empty() || speeds[static_cast<std::size_t>(domain)].empty()) return false;
  std::vector<double> healthy;
  for (int l : healthy_slots(domain)) healthy.push_back(speed(domain, l));
  return !all_equal(healthy);
}

Status validate_cluster_spec(ClusterSpec& spec) {
  if (spec.domains < 1) {
    return invalid_argument("--domains must be at least 1, got " + std::to_string(spec.domains));
  }
  if (spec.domain_size < 1) {
    return invalid_argument("--tp must be at least 1, got " + std::to_string(spec.domain_size));
  }
  if (spec.min_tp < 1 || spec.min_tp > spec.domain_size) {
    return invalid_argument("--min-tp " + std::to_string(spec.min_tp) +
                            " must be between 1 and --tp " + std::to_string(spec.domain_size));
  }
  for (const SlotRef& s : spec.failed) {
    if (s.domain < 0 || s.domain >= spec.domains) {
      return invalid_argument("failed slot " + slot_name(s) + ": domain " +
                              std::to_string(s.domain) + " is out of range; domains are 0.." +
                              std::to_string(spec.domains - 1));
    }
    if (s.slot < 0 || s.slot >= spec.domain_size) {
      return invalid_argument("failed slot " + slot_name(s) + ": slot " + std::to_string(s.slot) +
                              " is out of range; slots are 0.." +
                              std::to_string(spec.domain_size - 1) + " (the --tp size)");
    }
  }
  std::sort(spec.failed.begin(), spec.failed.end());
  auto dup = std::adjacent_find(spec.failed.begin(), spec.failed.end());
  if (dup != spec.failed.end()) {
    return invalid_argument("failed slot " + slot_name(*dup) +
                            " is listed twice; list each slot once");
  }
  NTP_RETURN_IF_ERROR(validate_left(spec));
  int max_degree = 0;
  for (int d = 0; d < spec.domains; ++d) {
    if (spec.has_left(d)) continue;
    const int t = spec.degree(d);
    if (t == 0) {
      return invalid_argument("domain " + std::to_string(d) + " has every one of its " +
                              std::to_string(spec.domain_size) +
                              " slots failed; a replica needs at least --min-tp healthy slots "
                              "(repair a slot or leave the domain out)");
    }
    if (t < spec.min_tp) {
      return invalid_argument("domain " + std::to_string(d) + " would run at TP degree " +
                              std::to_string(t) + ", below --min-tp " +
                              std::to_string(spec.min_tp) +
                              "; lower --min-tp or repair slots of that domain");
    }
    max_degree = std::max(max_degree, t);
  }
  for (const UnitSpace& space : spec.spaces) {
    if (!space.derived() && space.units < max_degree) {
      return invalid_argument(
          space.name + " has " + std::to_string(space.units) + " units, fewer than TP degree " +
          std::to_string(max_degree) +
          ": every rank needs at least one unit; use more units or a lower --tp");
    }
  }
  NTP_RETURN_IF_ERROR(validate_unit_loads(spec));
  if (!spec.speeds.empty()) {
    if (spec.speeds.size() != static_cast<std::size_t>(spec.domains)) {
      return invalid_argument("speeds are given for " + std::to_string(spec.speeds.size()) +
                              " domains, the cluster has " + std::to_string(spec.domains) +
                              "; give one list per domain (an empty list = equal speeds)");
    }
    for (int d = 0; d < spec.domains; ++d) {
      const std::vector<double>& of_domain = spec.speeds[static_cast<std::size_t>(d)];
      if (!of_domain.empty() && of_domain.size() != static_cast<std::size_t>(spec.domain_size)) {
        return invalid_argument("domain " + std::to_string(d) + " has " +
                                std::to_string(of_domain.size()) + " speeds for " +
                                std::to_string(spec.domain_size) +
                                " slots; give one speed per slot (--tp) or none");
      }
      for (std::size_t l = 0; l < of_domain.size(); ++l) {
        NTP_RETURN_IF_ERROR(
            validate_speed(of_domain[l], "speed of slot " + slot_name({d, static_cast<int>(l)})));
      }
    }
  }
  return ok_status();
}

}  // namespace ntp::shard
