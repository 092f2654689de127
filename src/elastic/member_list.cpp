#include "elastic/member_list.h"

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include <nlohmann/json.hpp>

namespace ntp::elastic {

bool MemberList::has(int id) const {
  return std::binary_search(members.begin(), members.end(), id);
}

bool MemberList::holds(int id) const {
  return std::binary_search(holders.begin(), holders.end(), id);
}

bool MemberList::parks(int id) const {
  return std::binary_search(parked.begin(), parked.end(), id);
}

std::string encode(const MemberList& list) {
  return nlohmann::json{{"epoch", list.epoch},
                        {"members", list.members},
                        {"holders", list.holders},
                        {"step", list.step},
                        {"base_epoch", list.base_epoch},
                        {"base_members", list.base_members},
                        {"base_layout", list.base_layout},
                        {"restarts", list.restarts},
                        {"decider", list.decider},
                        {"parked", list.parked}}
      .dump();
}

namespace {
constexpr std::string_view kTombstone = "superseded ";
}  // namespace

std::string encode_tombstone(int superseded_by) {
  return std::string(kTombstone) + std::to_string(superseded_by);
}

std::optional<int> decode_tombstone(const std::string& text) {
  if (!text.starts_with(kTombstone)) return std::nullopt;
  const std::string number = text.substr(kTombstone.size());
  char* end = nullptr;
  const long epoch = std::strtol(number.c_str(), &end, 10);
  if (number.empty() || *end != '\0' || epoch <= 0 || epoch > INT32_MAX) return std::nullopt;
  return static_cast<int>(epoch);
}

Result<MemberList> decode_member_list(const std::string& text) {
  try {
    const nlohmann::json j = nlohmann::json::parse(text);
    MemberList list;
    list.epoch = j.at("epoch").get<int>();
    list.members = j.at("members").get<std::vector<int>>();
    list.holders = j.at("holders").get<std::vector<int>>();
    list.step = j.at("step").get<std::int64_t>();
    list.base_epoch = j.at("base_epoch").get<int>();
    list.base_members = j.at("base_members").get<std::vector<int>>();
    list.base_layout = j.at("base_layout").get<std::string>();
    list.restarts = j.at("restarts").get<std::vector<int>>();
    list.decider = j.at("decider").get<int>();
    list.parked = j.at("parked").get<std::vector<int>>();
    return list;
  } catch (const std::exception& e) {
    return internal_error(std::string("corrupt member list: ") + e.what());
  }
}

std::string encode(const Announcement& a) {
  return nlohmann::json{{"committed", a.committed}, {"restart", a.restart}}.dump();
}

Result<Announcement> decode_announcement(const std::string& text) {
  try {
    const nlohmann::json j = nlohmann::json::parse(text);
    return Announcement{j.at("committed").get<std::int64_t>(), j.at("restart").get<int>()};
  } catch (const std::exception& e) {
    return internal_error(std::string("corrupt announcement: ") + e.what());
  }
}

MemberList initial_list(const std::vector<int>& members, int slots) {
  MemberList list;
  list.members = members;
  list.holders = members;
  list.base_members = members;
  list.restarts.assign(static_cast<size_t>(slots), 0);
  return list;
}

namespace {

// The announced ids to park: the dropped ones, and those whose domain would have fewer than
// min_tp of the others; none when that is every announced id. Ascending.
std::vector<int> parked_ids(const DecisionInput& in) {
  auto is_dropped = [&in](int id) {
    return std::find(in.dropped.begin(), in.dropped.end(), id) != in.dropped.end();
  };
  std::map<int, int> per_domain;
  const int size = in.domain_size > 0 ? in.domain_size : 1;
  for (const auto& entry : in.announced) {
    if (!is_dropped(entry.first)) ++per_domain[entry.first / size];
  }
  std::vector<int> out;
  for (const auto& entry : in.announced) {
    const bool short_domain =
        in.domain_size > 0 && in.min_tp > 1 && per_domain[entry.first / size] < in.min_tp;
    if (is_dropped(entry.first) || short_domain) out.push_back(entry.first);
  }
  if (out.size() == in.announced.size()) out.clear();
  return out;
}

}  // namespace

std::optional<MemberList> decide(const DecisionInput& in) {
  for (int id : in.expected) {
    if (in.announced.count(id) == 0 && !in.gone(id) && !in.window_over) return std::nullopt;
  }
  const MemberList& last = *in.last;
  MemberList out;
  out.epoch = in.epoch;
  out.restarts = last.restarts;
  if (in.last_complete) {
    out.base_epoch = last.epoch;
    out.base_members = last.members;
    out.base_layout = in.last_layout;
  } else {  // the last re-formation did not complete everywhere: start again from its base
    out.base_epoch = last.base_epoch;
    out.base_members = last.base_members;
    out.base_layout = last.base_layout;
  }
  out.parked = parked_ids(in);
  bool any_holder = false;
  for (const auto& [id, a] : in.announced) {
    if (out.parks(id)) continue;
    out.members.push_back(id);
    if (static_cast<size_t>(id) < out.restarts.size()) {
      out.restarts[static_cast<size_t>(id)] = a.restart;
    }
    if (std::binary_search(out.base_members.begin(), out.base_members.end(), id)) {
      out.holders.push_back(id);
      out.step = any_holder ? std::min(out.step, a.committed) : a.committed;
      any_holder = true;
    }
  }
  return out;  // std::map iterates ids in increasing order: members and holders are sorted
}

Result<ReformPlan> plan_reform(const MemberList& list, int me, HeldEpochs held,
                               std::int64_t committed, bool can_undo) {
  ReformPlan plan;
  if (!list.holds(me)) return plan;
  if (held.current == list.base_epoch) {
    plan.source_epoch = held.current;
  } else if (held.base == list.base_epoch) {
    plan.source_epoch = held.base;
  } else {
    return internal_error("epoch " + std::to_string(list.epoch) + " names member " +
                          std::to_string(me) + " a holder of epoch " +
                          std::to_string(list.base_epoch) + "'s state, which it does not hold");
  }
  // Only the current job can be ahead: in a base kept from an incomplete epoch no update was
  // applied after it (the first update needs every member past the re-formation).
  if (committed == list.step + 1 && plan.source_epoch == held.current && can_undo) {
    plan.roll_back = true;
  } else if (committed != list.step) {
    return internal_error("member " + std::to_string(me) + " is at step " +
                          std::to_string(committed) + " but epoch " + std::to_string(list.epoch) +
                          " agreed on step " + std::to_string(list.step));
  }
  return plan;
}

HeldEpochs after_reform(const MemberList& list, const ReformPlan& plan) {
  return HeldEpochs{list.epoch, plan.source_epoch};
}

int next_target(int received, const std::function<EpochView(int epoch)>& view, int* newest) {
  *newest = received;
  for (int target = received + 1;; ++target) {
    const EpochView v = view(target);
    if (v.superseded_by > target) {
      target = v.superseded_by - 1;  // the loop's increment lands on it
      continue;
    }
    if (v.has_me.has_value() && !*v.has_me) {
      *newest = target;
      return v.parks_me ? kParked : kFenced;
    }
    if (v.has_me.has_value()) *newest = target;
    if (!v.failed) return target;
  }
}

}  // namespace ntp::elastic
