// `ntp ckpt`: inspect, verify and consolidate checkpoints written by the trainer
// (format: docs/checkpoint.md).
#include <CLI/CLI.hpp>
#include <iostream>
#include <memory>

#include "checkpoint/hf_export.h"
#include "checkpoint/reader.h"
#include "cli/ckpt_inspect.h"
#include "cli/cli_error.h"
#include "cli/commands.h"

namespace ntp::cli {
namespace {

struct CkptOptions {
  std::string dir;
  std::string out;
  bool json = false;
  bool force = false;
};

int run_inspect(const CkptOptions& opt) {
  Result<checkpoint::CheckpointReader> reader = checkpoint::CheckpointReader::open(opt.dir);
  if (!reader.ok()) return report_error("ckpt inspect", reader.status());
  const nlohmann::json summary = inspect_json(*reader);
  if (opt.json) {
    std::cout << summary.dump() << "\n";
  } else {
    std::cout << render_inspect_text(summary);
  }
  return kExitOk;
}

int run_verify(const CkptOptions& opt) {
  Result<checkpoint::CheckpointReader> reader = checkpoint::CheckpointReader::open(opt.dir);
  if (!reader.ok()) return report_error("ckpt verify", reader.status());
  if (Status s = reader->verify_all(); !s.ok()) return report_error("ckpt verify", s);
  const checkpoint::Manifest& m = reader->manifest();
  std::cout << "ok: " << reader->step_dir().string() << " step " << m.meta.step << ": "
            << m.tensors.size() << " tensors, " << m.pieces.size() << " pieces in "
            << m.files().size() << " files, every (tensor, kind) covered exactly once, "
            << reader->chunks_verified() << " chunks (" << reader->bytes_read()
            << " bytes) match their checksums\n";
  return kExitOk;
}

int run_consolidate(const CkptOptions& opt) {
  Result<checkpoint::ConsolidateSummary> r =
      checkpoint::consolidate_to_hf(opt.dir, opt.out, {.force = opt.force});
  if (!r.ok()) return report_error("ckpt consolidate", r.status());
  std::cout << "wrote " << opt.out << "/model.safetensors (" << r->tensors << " tensors, "
            << r->bytes << " bytes, step " << r->step << ") and " << opt.out << "/config.json\n";
  return kExitOk;
}

}  // namespace

void add_ckpt_command(CLI::App& app, int& exit_code) {
  CLI::App* cmd = app.add_subcommand(
      "ckpt",
      "Inspect, verify and consolidate checkpoints (docs/checkpoint.md).\n"
      "DIR is a step directory (SAVE_DIR/step_00000042) or a save directory (follows `latest`).");
  cmd->require_subcommand(1);
  auto opt = std::make_shared<CkptOptions>();

  CLI::App* inspect = cmd->add_subcommand(
      "inspect", "Step, writers, tensors, pieces and layout of a checkpoint (no data is read)");
  inspect->add_option("DIR", opt->dir, "Checkpoint directory")->required();
  inspect->add_flag("--json", opt->json, "Emit one JSON object");
  inspect->callback([opt, &exit_code] { exit_code = run_inspect(*opt); });

  CLI::App* verify = cmd->add_subcommand(
      "verify",
      "Check the manifest, that every (tensor, kind) is covered exactly once, and every chunk's "
      "CRC-32C; exit 0 when all is good, 2 naming the first problem otherwise");
  verify->add_option("DIR", opt->dir, "Checkpoint directory")->required();
  verify->callback([opt, &exit_code] { exit_code = run_verify(*opt); });

  CLI::App* consolidate = cmd->add_subcommand(
      "consolidate",
      "Write OUT/model.safetensors (logical \"value\" tensors under Hugging Face GPT-2 names) and "
      "OUT/config.json for GPT2LMHeadModel.from_pretrained(OUT)");
  consolidate->add_option("DIR", opt->dir, "Checkpoint directory")->required();
  consolidate->add_option("--out", opt->out, "Output directory (must not exist or be empty)")
      ->required();
  consolidate->add_flag("--force", opt->force,
                        "Replace model.safetensors and config.json in a non-empty OUT");
  consolidate->callback([opt, &exit_code] { exit_code = run_consolidate(*opt); });
}

}  // namespace ntp::cli
