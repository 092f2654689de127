// The hidden `ntp hierarchy-worker`: a member of the control plane's domain hierarchy and nothing
// else, for `ntp launch --domain-size` jobs that exercise the protocol end to end
// (cli/hierarchy_worker_run.h; docs/launch.md, "Domain stores").
#include <CLI/CLI.hpp>
#include <memory>

#include "cli/commands.h"
#include "cli/hierarchy_worker_run.h"

namespace ntp::cli {

void add_hierarchy_worker_command(CLI::App& app, int& exit_code) {
  auto options = std::make_shared<HierarchyWorkerOptions>();
  auto step_ms = std::make_shared<long long>(20);
  auto hang_ms = std::make_shared<long long>(1000);
  auto global_hang_ms = std::make_shared<long long>(3000);
  CLI::App* cmd = app.add_subcommand(
      "hierarchy-worker",
      "Test worker for `ntp launch --domain-size`: the domain hierarchy's recovery protocol "
      "without training (see docs/launch.md)");
  cmd->group("");  // hidden from `ntp --help`
  cmd->add_option("--steps", options->steps, "Steps to run (each reported to the launcher)")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--step-ms", *step_ms, "Length of a step")->check(CLI::PositiveNumber);
  cmd->add_option("--hang-ms", *hang_ms, "A domain member without progress this long is hung")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--global-hang-ms", *global_hang_ms,
                  "A domain whose leader shows no progress this long is hung")
      ->check(CLI::PositiveNumber);
  cmd->callback([&exit_code, options, step_ms, hang_ms, global_hang_ms] {
    options->step_time = std::chrono::milliseconds(*step_ms);
    options->hang_detect = std::chrono::milliseconds(*hang_ms);
    options->global_hang_detect = std::chrono::milliseconds(*global_hang_ms);
    exit_code = run_hierarchy_worker(*options);
  });
}

}  // namespace ntp::cli
