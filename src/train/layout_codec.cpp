#include "train/layout_codec.h"

#include <algorithm>

#include <nlohmann/json.hpp>

namespace ntp::train {

std::string encode_layout(const shard::ClusterLayout& layout,
                          const std::vector<std::vector<double>>& measured_loads) {
  nlohmann::json failed = nlohmann::json::array();
  for (const shard::SlotRef& s : layout.spec.failed) failed.push_back({s.domain, s.slot});
  nlohmann::json slots = nlohmann::json::array();
  for (const shard::ReplicaLayout& r : layout.replicas) slots.push_back(r.slots);
  nlohmann::json out{{"failed", failed}, {"slots", slots}};
  if (!layout.spec.speeds.empty()) out["speeds"] = layout.spec.speeds;
  if (!layout.spec.left.empty()) out["left"] = layout.spec.left;
  if (!layout.spec.unit_loads.empty()) out["unit_loads"] = layout.spec.unit_loads;
  if (!measured_loads.empty()) out["measured_unit_loads"] = measured_loads;
  return out.dump();
}

Result<shard::ClusterLayout> decode_layout(const std::string& text, shard::ClusterSpec spec,
                                           const shard::SyncStrategy& strategy) {
  std::vector<std::vector<int>> slots;
  spec.failed.clear();
  try {
    const nlohmann::json j = nlohmann::json::parse(text);
    for (const nlohmann::json& f : j.at("failed")) {
      spec.failed.push_back({f.at(0).get<int>(), f.at(1).get<int>()});
    }
    slots = j.at("slots").get<std::vector<std::vector<int>>>();
    spec.speeds = j.value("speeds", std::vector<std::vector<double>>{});
    spec.left = j.value("left", std::vector<int>{});
    spec.unit_loads = j.value("unit_loads", std::vector<std::vector<double>>{});
  } catch (const std::exception& e) {
    return internal_error(std::string("corrupt layout: ") + e.what());
  }
  NTP_ASSIGN_OR_RETURN(shard::ClusterLayout layout, shard::plan_cluster(spec, strategy));
  if (slots.size() != layout.replicas.size()) return internal_error("layout of another cluster");
  for (size_t d = 0; d < slots.size(); ++d) {
    std::vector<int> mine = slots[d], planned = layout.replicas[d].slots;
    std::sort(mine.begin(), mine.end());
    std::sort(planned.begin(), planned.end());
    if (mine != planned) return internal_error("layout whose slots do not match its failed list");
    layout.replicas[d].slots = slots[d];
  }
  if (layout.spec.speeds.empty()) return layout;  // units follow from the degrees and loads
  // Weighted units follow the speeds of the slots in their order: planned again over the decoded
  // order (plan_cluster keeps every rank on its slot when a domain is weighted and its members are
  // those of `previous`, and where it is not, units do not depend on the slots).
  const shard::ClusterLayout ordered = layout;
  return shard::plan_cluster(ordered.spec, strategy, &ordered);
}

Result<std::vector<std::vector<double>>> published_unit_loads(const std::string& text) {
  if (text.empty()) return std::vector<std::vector<double>>{};
  try {
    return nlohmann::json::parse(text).value("measured_unit_loads",
                                             std::vector<std::vector<double>>{});
  } catch (const std::exception& e) {
    return internal_error(std::string("corrupt layout: ") + e.what());
  }
}

}  // namespace ntp::train
