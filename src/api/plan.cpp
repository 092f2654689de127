#include "api/plan.h"

#include <algorithm>
#include <memory>

#include "shard/fold_sync_strategy.h"
#include "shard/load_layout.h"
#include "shard/native_sync_strategy.h"

namespace ntp::api {
namespace {

using shard::ClusterLayout;
using shard::IntervalSet;
using shard::ReplicaLayout;
using shard::ReshardPlan;

nlohmann::json ranges_json(const IntervalSet& s) {
  nlohmann::json out = nlohmann::json::array();
  for (const auto& i : s.intervals()) out.push_back({i.begin, i.end});
  return out;
}

nlohmann::json slots_json(const std::vector<shard::SlotRef>& slots) {
  nlohmann::json out = nlohmann::json::array();
  for (const auto& s : slots) out.push_back({s.domain, s.slot});
  return out;
}

nlohmann::json replicas_json(const ClusterLayout& layout) {
  nlohmann::json out = nlohmann::json::array();
  for (const ReplicaLayout& r : layout.replicas) {
    nlohmann::json units = nlohmann::json::object(), imbalance = nlohmann::json::object();
    nlohmann::json load_imbalance = nlohmann::json::object();
    for (std::size_t sp = 0; sp < layout.spec.spaces.size(); ++sp) {
      nlohmann::json per_rank = nlohmann::json::array();
      for (const IntervalSet& s : r.units[sp]) per_rank.push_back(s.ids());
      const std::string& name = layout.spec.spaces[sp].name;
      units[name] = std::move(per_rank);
      imbalance[name] = r.imbalance(static_cast<int>(sp));
      if (layout.spec.has_loads(static_cast<int>(sp)) && r.degree() > 0) {
        load_imbalance[name] =
            shard::load_imbalance(r.units[sp], layout.spec.unit_loads[sp],
                                  std::vector<double>(static_cast<std::size_t>(r.degree()), 1.0));
      }
    }
    nlohmann::json replica = {{"domain", r.domain},
                              {"degree", r.degree()},
                              {"slots", r.slots},
                              {"units", std::move(units)},
                              {"imbalance", std::move(imbalance)}};
    if (!load_imbalance.empty()) replica["load_imbalance"] = std::move(load_imbalance);
    out.push_back(std::move(replica));
  }
  return out;
}

nlohmann::json sync_json(const ClusterLayout& layout) {
  const auto& spec = layout.spec;
  auto unit_bytes = [&](int sp) {
    return spec.spaces[static_cast<std::size_t>(sp)].params_per_unit * spec.bytes.grad_bytes;
  };
  nlohmann::json folds = nlohmann::json::array(), groups = nlohmann::json::array(),
                 costs = nlohmann::json::array();
  for (const auto& f : layout.sync.folds) {
    folds.push_back({{"space", spec.spaces[static_cast<std::size_t>(f.space)].name},
                     {"domain", f.domain},
                     {"from_rank", f.from_rank},
                     {"to_rank", f.to_rank},
                     {"units", ranges_json(f.units)},
                     {"bytes", f.units.count() * unit_bytes(f.space)}});
  }
  for (const auto& g : layout.sync.groups) {
    nlohmann::json members = nlohmann::json::array();
    for (const auto& m : g.members) members.push_back({m.domain, m.rank});
    groups.push_back({{"space", spec.spaces[static_cast<std::size_t>(g.space)].name},
                      {"index", g.index},
                      {"units", ranges_json(g.units)},
                      {"bytes_per_member", g.units.count() * unit_bytes(g.space)},
                      {"members", std::move(members)}});
  }
  for (const auto& replica : layout.sync.costs) {
    nlohmann::json per_rank = nlohmann::json::array();
    for (const auto& c : replica) {
      per_rank.push_back({{"fold_out_bytes", c.fold_out_bytes},
                          {"fold_in_bytes", c.fold_in_bytes},
                          {"dp_bytes", c.dp_bytes}});
    }
    costs.push_back(std::move(per_rank));
  }
  return {{"strategy", layout.sync.strategy},
          {"sync_degree", layout.sync.sync_degree},
          {"folds", std::move(folds)},
          {"dp_groups", std::move(groups)},
          {"rank_costs", std::move(costs)}};
}

nlohmann::json reshard_json(const ClusterLayout& to, const ReshardPlan& plan) {
  nlohmann::json transfers = nlohmann::json::array();
  for (const auto& t : plan.transfers) {
    transfers.push_back({{"space", to.spec.spaces[static_cast<std::size_t>(t.space)].name},
                         {"source", {t.source.domain, t.source.slot}},
                         {"destination", {t.destination.domain, t.destination.slot}},
                         {"units", ranges_json(t.units)},
                         {"bytes", t.bytes}});
  }
  return {{"transfers", std::move(transfers)},
          {"intra_domain_bytes", plan.intra_domain_bytes},
          {"dp_peer_bytes", plan.dp_peer_bytes},
          {"kept_bytes", plan.kept_bytes},
          {"max_bytes_into_slot", plan.max_bytes_into_slot}};
}

// The experts space's measured loads, from --expert-loads (none given: none).
Status set_expert_loads(shard::ClusterSpec& spec, const std::vector<double>& loads) {
  if (loads.empty()) return ok_status();
  for (std::size_t sp = 0; sp < spec.spaces.size(); ++sp) {
    if (spec.spaces[sp].name != "experts") continue;
    if (static_cast<std::int64_t>(loads.size()) != spec.spaces[sp].units) {
      return invalid_argument("--expert-loads has " + std::to_string(loads.size()) +
                              " values for --experts " + std::to_string(spec.spaces[sp].units) +
                              "; give one load (routed tokens) per expert");
    }
    spec.unit_loads.assign(spec.spaces.size(), {});
    spec.unit_loads[sp] = loads;
    return ok_status();
  }
  return invalid_argument("--expert-loads needs a MoE (--experts E)");
}

}  // namespace

Result<PlanResult> compute_plan(PlanRequest opt) {
  if (opt.shape.hidden == 0) opt.shape.hidden = 128 * opt.shape.heads;
  NTP_RETURN_IF_ERROR(shard::validate_model_shape(opt.shape));
  if (opt.bytes.grad_bytes <= 0 || opt.bytes.state_bytes <= 0) {
    return invalid_argument("--grad-bytes and --state-bytes must be positive");
  }
  NTP_ASSIGN_OR_RETURN(std::vector<shard::SlotRef> failed,
                       shard::parse_slot_list(opt.failed, "--failed"));
  NTP_ASSIGN_OR_RETURN(std::vector<shard::SlotRef> repair,
                       shard::parse_slot_list(opt.repair, "--repair"));

  shard::ClusterSpec spec;
  spec.domains = opt.domains;
  spec.domain_size = opt.tp;
  spec.min_tp = opt.min_tp;
  spec.spaces = shard::model_unit_spaces(opt.shape);
  spec.bytes = opt.bytes;
  NTP_RETURN_IF_ERROR(set_expert_loads(spec, opt.expert_loads));
  std::unique_ptr<shard::SyncStrategy> strategy_ptr;
  if (opt.strategy == "fold") {
    strategy_ptr = std::make_unique<shard::FoldSyncStrategy>();
  } else if (opt.strategy == "native") {
    strategy_ptr = std::make_unique<shard::NativeSyncStrategy>(opt.tp);
  } else {
    return invalid_argument("--strategy '" + opt.strategy + "' is unknown; use fold or native");
  }
  const shard::SyncStrategy& strategy = *strategy_ptr;

  PlanResult result;
  result.shape = opt.shape;
  NTP_ASSIGN_OR_RETURN(result.healthy, shard::plan_cluster(spec, strategy));
  spec.failed = failed;
  shard::leave_domains_without_slots(spec);
  NTP_ASSIGN_OR_RETURN(result.degraded, shard::plan_cluster(spec, strategy, &result.healthy));
  NTP_ASSIGN_OR_RETURN(result.on_failure, shard::plan_reshard(result.healthy, result.degraded));
  if (!repair.empty()) {
    shard::ClusterSpec repaired = result.degraded.spec;
    for (const shard::SlotRef& s : repair) {
      auto it = std::find(repaired.failed.begin(), repaired.failed.end(), s);
      if (it == repaired.failed.end()) {
        return invalid_argument("--repair " + std::to_string(s.domain) + ":" +
                                std::to_string(s.slot) +
                                " is not a failed slot; repair only slots listed in --failed");
      }
      repaired.failed.erase(it);
    }
    repaired.left.clear();  // a domain with a repaired slot is back in the job
    shard::leave_domains_without_slots(repaired);
    NTP_ASSIGN_OR_RETURN(result.repaired,
                         shard::plan_cluster(repaired, strategy, &result.degraded));
    NTP_ASSIGN_OR_RETURN(result.on_repair, shard::plan_reshard(result.degraded, *result.repaired));
  }
  return result;
}

nlohmann::json plan_to_json(const PlanResult& result) {
  const auto& spec = result.degraded.spec;
  const auto& m = result.shape;
  nlohmann::json spaces = nlohmann::json::array();
  for (const auto& s : spec.spaces) {
    spaces.push_back(
        {{"name", s.name}, {"units", s.units}, {"params_per_unit", s.params_per_unit}});
  }
  nlohmann::json out = {
      {"cluster",
       {{"domains", spec.domains},
        {"tp", spec.domain_size},
        {"min_tp", spec.min_tp},
        {"failed", slots_json(spec.failed)},
        {"repaired_failed",
         result.repaired ? slots_json(result.repaired->spec.failed) : nlohmann::json(nullptr)}}},
      {"model",
       {{"heads", m.heads},
        {"hidden", m.hidden},
        {"ffn", m.ffn},
        {"ffn_block", m.ffn_block},
        {"vocab", m.vocab},
        {"layers", m.layers},
        {"grad_bytes", spec.bytes.grad_bytes},
        {"state_bytes", spec.bytes.state_bytes}}},
      {"spaces", std::move(spaces)},
      {"replicas", replicas_json(result.degraded)},
      {"sync", sync_json(result.degraded)},
      {"reshard",
       {{"failure", reshard_json(result.degraded, result.on_failure)},
        {"repair", result.on_repair ? reshard_json(*result.repaired, *result.on_repair)
                                    : nlohmann::json(nullptr)}}},
      {"repaired", result.repaired ? nlohmann::json{{"replicas", replicas_json(*result.repaired)},
                                                    {"sync", sync_json(*result.repaired)}}
                                   : nlohmann::json(nullptr)},
  };
  return out;
}

}  // namespace ntp::api
