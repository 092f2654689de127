// The single `ntp` binary. Subcommands live in *_command.cpp and are registered below.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <string>

#include "cli/cli_error.h"
#include "cli/commands.h"

int main(int argc, char** argv) {
  CLI::App app{
      "ntp: Nonuniform Tensor Parallelism for LLM training.\n"
      "A replica that loses a GPU keeps training at a lower TP degree; replicas of different\n"
      "degrees still synchronize gradients. See README.md and docs/ for details.",
      "ntp"};
  app.set_version_flag("--version", "ntp " NTP_VERSION_STRING);
  app.require_subcommand(1);
  app.fallthrough(false);

  int exit_code = ntp::cli::kExitOk;
  // One add_<name>_command call per subcommand this build has, in CMakeLists.txt's order.
#define NTP_CLI_COMMAND(name) ntp::cli::add_##name##_command(app, exit_code);
#include "registered_commands.inc"
#undef NTP_CLI_COMMAND

  try {
    app.parse(argc, argv);
  } catch (const CLI::Success& e) {
    // --help, --help-all, --version: CLI11 prints them and exits 0.
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    // Malformed command lines are bad input: one line naming the problem, exit code 2.
    if (app.get_subcommands().empty()) {
      // No command was recognised: name what was given and what exists.
      std::string commands;
      for (const CLI::App* sub : app.get_subcommands([](CLI::App* s) {
             return !s->get_group().empty();  // hidden commands have no group
           })) {
        commands += (commands.empty() ? "" : ", ") + sub->get_name();
      }
      std::string problem = argc == 1 ? std::string("no command given") : std::string(e.what());
      if (argc > 1 && argv[1][0] != '-') problem = "unknown command '" + std::string(argv[1]) + "'";
      std::fprintf(stderr, "ntp: error: %s; the commands are: %s (run `ntp --help`)\n",
                   problem.c_str(), commands.c_str());
      return ntp::cli::kExitBadInput;
    }
    std::fprintf(stderr, "ntp: error: %s (run `ntp --help` or `ntp <command> --help`)\n", e.what());
    return ntp::cli::kExitBadInput;
  }
  return exit_code;
}
