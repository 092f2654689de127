// `ntp plan`: lay out a cluster whose replicas run at mixed TP degrees after failures; print the
// per-replica layouts, the gradient sync plan, and the reshard plans for the failure and a repair.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdio>
#include <iostream>

#include "cli/cli_error.h"
#include "cli/commands.h"
#include "cli/plan_report.h"

namespace ntp::cli {
namespace {

// The request plus how to print it.
struct PlanOptions {
  api::PlanRequest request;
  bool json = false;
  bool details = false;
};

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
      "--ffn-block 256\n"
      "A MoE (experts dealt whole: nonuniform expert parallelism): ntp plan --domains 4 --tp 8 "
      "--failed 1:3 --heads 32 --kv-heads 8 --vocab 32000 --experts 64 --ffn 2048");
  cmd->add_option("--domains", opt->request.domains, "Scale-up domains (= DP replicas)")
      ->required();
  cmd->add_option("--tp", opt->request.tp, "Full TP degree = device slots per domain")->required();
  cmd->add_option("--failed", opt->request.failed,
                  "Failed slots, DOMAIN:SLOT[,DOMAIN:SLOT...] (every slot of a domain: its "
                  "replica left the job)");
  cmd->add_option("--repair", opt->request.repair,
                  "Failed slots that come back, DOMAIN:SLOT[,...]: adds the repair reshard plan");
  cmd->add_option("--min-tp", opt->request.min_tp, "Lowest TP degree a replica may run at")
      ->capture_default_str();
  cmd->add_option("--heads", opt->request.shape.heads, "Attention heads (one unit each)")
      ->required();
  cmd->add_option("--ffn", opt->request.shape.ffn, "FFN width in columns")->required();
  cmd->add_option("--ffn-block", opt->request.shape.ffn_block, "FFN columns per unit")
      ->capture_default_str();
  cmd->add_option("--vocab", opt->request.shape.vocab,
                  "Vocabulary rows (one unit each); 0 = not split")
      ->capture_default_str();
  cmd->add_option("--kv-heads", opt->request.shape.kv_heads,
                  "Key/value heads of grouped-query attention (Llama family; 0 = none): adds "
                  "the kv (derived) and head_rows spaces; needs --vocab")
      ->capture_default_str();
  cmd->add_option("--experts", opt->request.shape.experts,
                  "Routed experts of a Mixtral-style MoE (0 = dense): adds the experts space, "
                  "whole experts dealt over each replica's ranks; --ffn is then one expert's "
                  "width; needs --kv-heads")
      ->capture_default_str();
  cmd->add_option("--expert-loads", opt->request.expert_loads,
                  "MoE: routed tokens per expert as a router measured them, comma-separated: a "
                  "replica below its full degree places its experts by load, as ntp train does "
                  "after a failure; adds each replica's load imbalance (busiest rank / mean)")
      ->delimiter(',');
  cmd->add_option("--shared-experts", opt->request.shape.shared_experts,
                  "MoE shared experts, each --ffn wide: the ffn space's columns")
      ->capture_default_str();
  cmd->add_option("--hidden", opt->request.shape.hidden, "Model width (default 128 x heads)");
  cmd->add_option("--layers", opt->request.shape.layers, "Transformer layers (bytes scale with it)")
      ->capture_default_str();
  cmd->add_option("--grad-bytes", opt->request.bytes.grad_bytes, "Gradient bytes per parameter")
      ->capture_default_str();
  cmd->add_option("--state-bytes", opt->request.bytes.state_bytes,
                  "Bytes per parameter a reshard moves (weights + optimizer state)")
      ->capture_default_str();
  cmd->add_option("--strategy", opt->request.strategy,
                  "Gradient sync strategy: fold (re-lay out every replica around the smallest "
                  "degree; small per-step folds) or native (healthy replicas keep their layout; "
                  "degraded ones fold more) — see docs/design/layout-algebra.md")
      ->capture_default_str();
  cmd->add_flag("--json", opt->json, "Emit one JSON object (schema: docs/plan-json.md)");
  cmd->add_flag("--details", opt->details,
                "List every rank's units, every fold and every transfer");
  cmd->callback([opt, &exit_code] {
    Result<api::PlanResult> result = api::compute_plan(opt->request);
    if (!result.ok()) {
      exit_code = report_error("plan", result.status());
      return;
    }
    if (opt->json) {
      std::cout << api::plan_to_json(*result).dump() << "\n";
    } else {
      std::cout << render_plan_text(*result, opt->details);
    }
    exit_code = kExitOk;
  });
}

}  // namespace ntp::cli
