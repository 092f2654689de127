// `ntp eval SOURCE --data FILE.bin --context T --batch B [--windows N] [--offset K]
// [--domains D --tp P --failed ...]`: the mean loss of an ntp checkpoint or a Hugging Face GPT-2 /
// Llama directory over contiguous windows of a token file, in one process or as a job of any
// layout under `ntp launch` (docs/train.md, "Evaluating a checkpoint").
#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>

#include "cli/cli_error.h"
#include "cli/commands.h"
#include "data/token_file.h"
#include "launch/identity.h"
#include "train/job.h"
#include "train/job_window_eval.h"
#include "train/weight_source.h"
#include "train/window_eval.h"

namespace ntp::cli {
namespace {

struct EvalArgs {
  std::string source;
  std::string data;
  train::WindowEvalOptions options;
  int domains = 1;
  int tp = 1;
  std::string failed;
};

// What every worker checks before any of them connects, so that bad input exits 2 on all of them
// with nothing computed.
struct EvalInputs {
  train::WeightSource source;
  std::vector<uint16_t> tokens;
  train::WindowEvalOptions windows;  // resolved
  train::TrainConfig job;            // the model and the cluster (--domains, --tp, --failed)
};

Result<EvalInputs> read_inputs(const EvalArgs& args) {
  EvalInputs in;
  NTP_ASSIGN_OR_RETURN(in.source, train::open_weight_source(args.source));
  Result<std::vector<uint16_t>> tokens = data::read_token_file(args.data);
  if (!tokens.ok()) {
    if (tokens.status().code() == StatusCode::kNotFound) {
      return invalid_argument("--data " + args.data + " does not exist");
    }
    return tokens.status();
  }
  in.tokens = std::move(*tokens);
  NTP_ASSIGN_OR_RETURN(
      in.windows, train::resolve_windows(args.options, in.tokens, in.source.config, args.data));
  train::TrainConfig& c = in.job;
  c.model = in.source.config;
  c.domains = args.domains;
  c.tp = args.tp;
  NTP_ASSIGN_OR_RETURN(c.failed, shard::parse_slot_list(args.failed, "--failed"));
  shard::ClusterSpec spec = train::cluster_spec(c);
  NTP_RETURN_IF_ERROR(shard::validate_cluster_spec(spec));  // e.g. --tp above the heads
  c.failed = spec.failed;
  return in;
}

// The worker's place under `ntp launch`; nullopt for a one-process run (no NTP_RANK), which only
// a layout of one slot may be.
Result<std::optional<train::WorkerContext>> launched_context(const train::TrainConfig& c) {
  const launch::EnvLookup env = launch::process_env();
  if (!env("NTP_RANK")) {
    if (c.world_slots() == 1) return std::optional<train::WorkerContext>();
    return invalid_argument("a layout of " + std::to_string(c.world_slots()) +
                            " device slots (--domains x --tp) runs under `ntp launch "
                            "--nproc-per-node " +
                            std::to_string(c.world_slots()) + " -- ntp eval ...`");
  }
  NTP_ASSIGN_OR_RETURN(launch::WorkerIdentity id, launch::worker_identity_from_env(env));
  if (id.world_size != c.world_slots()) {
    return invalid_argument("ntp launch started " + std::to_string(id.world_size) +
                            " workers but --domains " + std::to_string(c.domains) + " x --tp " +
                            std::to_string(c.tp) + " = " + std::to_string(c.world_slots()) +
                            " device slots; make them equal");
  }
  train::WorkerContext ctx;
  ctx.slot_rank = id.rank;
  ctx.attempt = id.attempt;
  ctx.restart_count = id.restart_count;
  ctx.local_addr = id.local_addr;
  NTP_ASSIGN_OR_RETURN(ctx.store, comm::open_store(id.store, id.run_id));
  return std::optional<train::WorkerContext>(std::move(ctx));
}

// "TP 4,3 under ntp launch": the replicas' degrees, for the speed line.
std::string layout_text(const train::TrainConfig& c) {
  const shard::ClusterSpec spec = train::cluster_spec(c);
  std::string out = "TP ";
  for (int d = 0; d < c.domains; ++d) out += (d > 0 ? "," : "") + std::to_string(spec.degree(d));
  return out + " under ntp launch";
}

// The one-process evaluation: the whole model on this rank.
Result<train::WindowEvalResult> evaluate_alone(const EvalInputs& in) {
  NTP_ASSIGN_OR_RETURN(std::unique_ptr<model::Model> model, train::load_whole_model(in.source));
  return train::evaluate_windows(*model, in.tokens, in.windows);
}

int run(const EvalArgs& args) {
  const char* rank_env = std::getenv("NTP_RANK");
  // Bad input is the same on every worker: launcher rank 0 says it (even when its slot is in
  // --failed), every one exits 2.
  const bool speaker = rank_env == nullptr || std::string(rank_env) == "0";
  auto bad = [&](const Status& s) {
    if (speaker) return report_error("eval", s);
    return s.code() == StatusCode::kInvalidArgument ? kExitBadInput : kExitFailure;
  };
  Result<EvalInputs> in = read_inputs(args);
  if (!in.ok()) return bad(in.status());
  Result<std::optional<train::WorkerContext>> ctx = launched_context(in->job);
  if (!ctx.ok()) return bad(ctx.status());
  const train::TrainConfig& c = in->job;
  if (*ctx) {
    // Missing tensors and wrong shapes are found here, before any worker connects.
    if (Status s = train::check_weight_source(in->source, c.model); !s.ok()) return bad(s);
  }

  const auto t0 = std::chrono::steady_clock::now();
  Result<train::WindowEvalResult> result = train::WindowEvalResult{};
  bool prints = true;  // world rank 0: the first active slot, slot 0:0 unless that one failed
  if (!*ctx) {
    result = evaluate_alone(*in);
  } else {
    const shard::SlotRef slot{(*ctx)->slot_rank / c.tp, (*ctx)->slot_rank % c.tp};
    // A failed slot's worker takes no part and says nothing (stdout holds the one JSON line).
    if (std::binary_search(c.failed.begin(), c.failed.end(), slot)) return kExitOk;
    Result<shard::ClusterLayout> layout =
        shard::plan_cluster(train::cluster_spec(c), *train::make_strategy(c));
    if (!layout.ok()) return bad(layout.status());
    prints = train::active_slots(*layout).front() == slot;
    result = train::evaluate_windows_in_job(c, **ctx, std::move(*layout), slot, in->source,
                                            in->tokens, in->windows);
  }
  if (!result.ok()) return bad(result.status());
  if (!prints) return kExitOk;
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::cout << nlohmann::json{{"loss", result->loss},
                              {"tokens", result->tokens},
                              {"windows", result->windows}}
                   .dump()
            << "\n";
  const std::string where = *ctx ? layout_text(c) : "one process";
  std::fprintf(stderr, "ntp eval: %s: %lld windows of %lld tokens in %.2f s (%.0f tokens/s), %s\n",
               in->source.dir.c_str(), static_cast<long long>(result->windows),
               static_cast<long long>(in->windows.context), seconds,
               static_cast<double>(result->tokens) / seconds, where.c_str());
  return kExitOk;
}

}  // namespace

void add_eval_command(CLI::App& app, int& exit_code) {
  auto args = std::make_shared<EvalArgs>();
  CLI::App* cmd = app.add_subcommand(
      "eval",
      "Mean loss of a model over contiguous windows of a token file, in one process or, with "
      "--domains/--tp/--failed, as a job of any layout under `ntp launch --nproc-per-node "
      "DOMAINS*TP -- ntp eval ...` (each replica evaluates a share of the batches at its TP "
      "degree). SOURCE is an ntp checkpoint (a step or save directory, any layout) or a Hugging "
      "Face directory (config.json + model.safetensors: GPT2LMHeadModel, LlamaForCausalLM, "
      "MixtralForCausalLM, or Qwen2MoeForCausalLM as ntp exports it). "
      "Window i holds tokens OFFSET + i*T .. OFFSET + (i+1)*T: T inputs and their T next-token "
      "targets. Prints one JSON line {\"loss\" (nats, mean over the targets), \"tokens\" "
      "(targets), \"windows\"} on stdout (world rank 0 only); the speed goes to stderr");
  cmd->option_defaults()->always_capture_default();
  cmd->add_option("SOURCE", args->source, "ntp checkpoint or Hugging Face directory")->required();
  cmd->add_option("--data", args->data, "Tokens (llm.c .bin, uint16)")->required();
  cmd->add_option("--context", args->options.context,
                  "T: tokens per window (at most the model's context)")
      ->required();
  cmd->add_option("--batch", args->options.batch, "B: windows per forward pass")->required();
  cmd->add_option("--windows", args->options.windows,
                  "N: windows to evaluate (0: every whole window after --offset)");
  cmd->add_option("--offset", args->options.offset, "K: the first window's first token");
  auto cluster = "Layout (under ntp launch)";
  cmd->add_option("--domains", args->domains, "Scale-up domains, one DP replica each")
      ->group(cluster);
  cmd->add_option("--tp", args->tp, "Device slots per domain: a healthy replica's TP degree")
      ->group(cluster);
  cmd->add_option("--failed", args->failed,
                  "Failed slots DOMAIN:SLOT[,...]: their replicas run at a lower degree, their "
                  "workers exit 0 at once")
      ->group(cluster);
  cmd->callback([&exit_code, args] { exit_code = run(*args); });
}

}  // namespace ntp::cli
