// `ntp plan`: lay out a cluster whose replicas run at mixed TP degrees after failures; print the
// per-replica layouts, the gradient sync plan, and the reshard plans for the failure and a repair.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdio>
#include <iostream>

#include "cli/cli_error.h"
#include "cli/commands.h"
#include "cli/plan_report.h"
#include "shard/fold_sync_strategy.h"
#include "shard/native_sync_strategy.h"

namespace ntp::cli {
namespace {

struct PlanOptions {
  int domains = 0;
  int tp = 0;
  int min_tp = 1;
  std::string failed;
  std::string repair;
  shard::ModelShape shape;
  shard::ByteCosts bytes;
  std::string strategy = "fold";
  bool json = false;
  bool details = false;
};

Result<PlanResult> compute_plan(PlanOptions opt) {
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
    NTP_ASSIGN_OR_RETURN(result.repaired,
                         shard::plan_cluster(repaired, strategy, &result.degraded));
    NTP_ASSIGN_OR_RETURN(result.on_repair, shard::plan_reshard(result.degraded, *result.repaired));
  }
  return result;
}

}  // namespace

void add_plan_command(CLI::App& app, int& exit_code) {
  auto opt = std::make_shared<PlanOptions>();
  CLI::App* cmd = app.add_subcommand(
      "plan",
      "Lay out a cluster whose replicas run at mixed TP degrees after GPU failures.\n"
      "One DP replica per scale-up domain; a domain with f failed slots runs at TP (tp - f).\n"
      "Prints each replica's degree, slots, units per rank and imbalance, the gradient sync plan\n"
      "(fold inside replicas, DP groups across them), and the reshard plans with bytes moved.\n"
      "Example: ntp plan --domains 16 --tp 72 --failed 3:5,7:0 --heads 128 --ffn 81920 "
      "--ffn-block 256");
  cmd->add_option("--domains", opt->domains, "Scale-up domains (= DP replicas)")->required();
  cmd->add_option("--tp", opt->tp, "Full TP degree = device slots per domain")->required();
  cmd->add_option("--failed", opt->failed, "Failed slots, DOMAIN:SLOT[,DOMAIN:SLOT...]");
  cmd->add_option("--repair", opt->repair,
                  "Failed slots that come back, DOMAIN:SLOT[,...]: adds the repair reshard plan");
  cmd->add_option("--min-tp", opt->min_tp, "Lowest TP degree a replica may run at")
      ->capture_default_str();
  cmd->add_option("--heads", opt->shape.heads, "Attention heads (one unit each)")->required();
  cmd->add_option("--ffn", opt->shape.ffn, "FFN width in columns")->required();
  cmd->add_option("--ffn-block", opt->shape.ffn_block, "FFN columns per unit")
      ->capture_default_str();
  cmd->add_option("--vocab", opt->shape.vocab, "Vocabulary rows (one unit each); 0 = not split")
      ->capture_default_str();
  cmd->add_option("--hidden", opt->shape.hidden, "Model width (default 128 x heads)");
  cmd->add_option("--layers", opt->shape.layers, "Transformer layers (bytes scale with it)")
      ->capture_default_str();
  cmd->add_option("--grad-bytes", opt->bytes.grad_bytes, "Gradient bytes per parameter")
      ->capture_default_str();
  cmd->add_option("--state-bytes", opt->bytes.state_bytes,
                  "Bytes per parameter a reshard moves (weights + optimizer state)")
      ->capture_default_str();
  cmd->add_option("--strategy", opt->strategy,
                  "Gradient sync strategy: fold (re-lay out every replica around the smallest "
                  "degree; small per-step folds) or native (healthy replicas keep their layout; "
                  "degraded ones fold more) — see docs/design/layout-algebra.md")
      ->capture_default_str();
  cmd->add_flag("--json", opt->json, "Emit one JSON object (schema: docs/plan-json.md)");
  cmd->add_flag("--details", opt->details,
                "List every rank's units, every fold and every transfer");
  cmd->callback([opt, &exit_code] {
    Result<PlanResult> result = compute_plan(*opt);
    if (!result.ok()) {
      exit_code = report_error("plan", result.status());
      return;
    }
    if (opt->json) {
      std::cout << plan_to_json(*result).dump() << "\n";
    } else {
      std::cout << render_plan_text(*result, opt->details);
    }
    exit_code = kExitOk;
  });
}

}  // namespace ntp::cli
