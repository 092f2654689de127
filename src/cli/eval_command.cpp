// `ntp eval SOURCE --data FILE.bin --context T --batch B [--windows N] [--offset K]`: the mean
// loss of an ntp checkpoint or a Hugging Face GPT-2 / Llama directory over contiguous windows of
// a token file, in one process (docs/train.md, "Evaluating a checkpoint").
#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>

#include "cli/cli_error.h"
#include "cli/commands.h"
#include "train/token_file.h"
#include "train/weight_source.h"
#include "train/window_eval.h"

namespace ntp::cli {
namespace {

struct EvalArgs {
  std::string source;
  std::string data;
  train::WindowEvalOptions options;
};

int run(const EvalArgs& args) {
  Result<train::WeightSource> source = train::open_weight_source(args.source);
  if (!source.ok()) return report_error("eval", source.status());
  Result<std::vector<uint16_t>> tokens = train::read_token_file(args.data);
  if (!tokens.ok()) {
    const Status s = tokens.status().code() == StatusCode::kNotFound
                         ? invalid_argument("--data " + args.data + " does not exist")
                         : tokens.status();
    return report_error("eval", s);
  }
  Result<train::WindowEvalOptions> windows =
      train::resolve_windows(args.options, *tokens, source->config, args.data);
  if (!windows.ok()) return report_error("eval", windows.status());
  Result<std::unique_ptr<model::Model>> model = train::load_whole_model(*source);
  if (!model.ok()) return report_error("eval", model.status());

  const auto t0 = std::chrono::steady_clock::now();
  Result<train::WindowEvalResult> result = train::evaluate_windows(**model, *tokens, *windows);
  if (!result.ok()) return report_error("eval", result.status());
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::cout << nlohmann::json{{"loss", result->loss},
                              {"tokens", result->tokens},
                              {"windows", result->windows}}
                   .dump()
            << "\n";
  std::fprintf(stderr, "ntp eval: %s: %lld windows of %lld tokens in %.2f s (%.0f tokens/s)\n",
               source->dir.c_str(), static_cast<long long>(result->windows),
               static_cast<long long>(windows->context), seconds,
               static_cast<double>(result->tokens) / seconds);
  return kExitOk;
}

}  // namespace

void add_eval_command(CLI::App& app, int& exit_code) {
  auto args = std::make_shared<EvalArgs>();
  CLI::App* cmd = app.add_subcommand(
      "eval",
      "Mean loss of a model over contiguous windows of a token file, in one process. SOURCE is an "
      "ntp checkpoint (a step or save directory, any layout) or a Hugging Face directory "
      "(config.json + model.safetensors: GPT2LMHeadModel or LlamaForCausalLM). Window i holds "
      "tokens OFFSET + i*T .. OFFSET + (i+1)*T: T inputs and their T next-token targets. Prints "
      "one JSON line {\"loss\" (nats, mean over the targets), \"tokens\" (targets), \"windows\"} "
      "on stdout; the speed goes to stderr");
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
  cmd->callback([&exit_code, args] { exit_code = run(*args); });
}

}  // namespace ntp::cli
