// Registration of `ntp` subcommands. Each add_*_command adds one subcommand to `app`; when it runs,
// its callback stores the process exit code in `exit_code`.
#pragma once

namespace CLI {
class App;
}

namespace ntp::cli {

void add_plan_command(CLI::App& app, int& exit_code);    // shard/
void add_sim_command(CLI::App& app, int& exit_code);     // sim/
void add_power_command(CLI::App& app, int& exit_code);   // power/
void add_launch_command(CLI::App& app, int& exit_code);  // elastic/
void add_train_command(CLI::App& app, int& exit_code);   // train/
void add_demo_command(CLI::App& app, int& exit_code);    // runs ntp launch + ntp train
void add_ckpt_command(CLI::App& app, int& exit_code);    // checkpoint/
void add_eval_command(CLI::App& app, int& exit_code);    // train/ (weights, windows)
// Hidden: a member of the domain hierarchy's control plane only (elastic/, launch/).
void add_hierarchy_worker_command(CLI::App& app, int& exit_code);

}  // namespace ntp::cli
