// Registration of `ntp` subcommands. Each add_*_command adds one subcommand to `app`; when it runs,
// its callback stores the process exit code in `exit_code`.
#pragma once

namespace CLI {
class App;
}

namespace ntp::cli {

void add_plan_command(CLI::App& app, int& exit_code);

}  // namespace ntp::cli
