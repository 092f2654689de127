// `ntp plan`: lay out a cluster with failures, print its sync and reshard plans.
#include <CLI/CLI.hpp>

#include "cli/cli_error.h"
#include "cli/commands.h"

namespace ntp::cli {

void add_plan_command(CLI::App& app, int& exit_code) {
  CLI::App* cmd = app.add_subcommand("plan", "Plan layouts for a cluster with failed GPUs");
  cmd->callback([&exit_code] { exit_code = report_error("plan", unimplemented("not yet")); });
}

}  // namespace ntp::cli
