// `ntp launch` (start, watch and break workers; docs/launch.md) and the hidden `ntp comm-worker`
// it is tested and demonstrated with.
#include <CLI/CLI.hpp>

#include "cli/cli_error.h"
#include "cli/commands.h"
#include "launch/comm_worker.h"
#include "launch/launcher.h"

namespace ntp::cli {
namespace {

struct LaunchArgs {
  int nproc_per_node = 1;
  std::optional<int> nnodes;
  std::optional<int> node_rank;
  std::string store;
  std::string run_id;
  std::vector<std::string> inject;
  std::string chaos;
  std::string log_dir;
  bool no_prefix = false;
  double grace_seconds = 3.0;
  bool restart_on_failure = false;
  std::optional<int> max_restarts;
  int replace_failed = 0;
  std::string ranks;
  std::string local_addr;
  int domain_size = 0;
  std::string domain_store;
  std::vector<std::string> command;
};

// "0,3" -> {0, 3}.
Result<std::vector<int>> parse_ranks(const std::string& text) {
  std::vector<int> ranks;
  std::size_t begin = 0;
  for (;;) {
    const std::size_t comma = text.find(',', begin);
    const std::string item =
        text.substr(begin, comma == std::string::npos ? std::string::npos : comma - begin);
    try {
      std::size_t used = 0;
      ranks.push_back(std::stoi(item, &used));
      if (used != item.size()) throw std::invalid_argument(item);
    } catch (const std::exception&) {
      return invalid_argument("--ranks '" + text + "' has '" + item +
                              "', not a rank: give comma-separated global ranks, e.g. 0,3");
    }
    if (comma == std::string::npos) return ranks;
    begin = comma + 1;
  }
}

Result<launch::LaunchOptions> to_options(const LaunchArgs& args) {
  launch::LaunchOptions options;
  options.nproc_per_node = args.nproc_per_node;
  options.nnodes = args.nnodes;
  options.node_rank = args.node_rank;
  options.store = args.store;
  options.run_id = args.run_id;
  for (const std::string& text : args.inject) {
    NTP_ASSIGN_OR_RETURN(launch::FaultSpec fault, launch::parse_fault_spec(text));
    options.faults.push_back(fault);
  }
  if (!args.chaos.empty()) {
    NTP_ASSIGN_OR_RETURN(launch::ChaosSpec chaos, launch::parse_chaos_spec(args.chaos));
    options.chaos = chaos;
  }
  options.log_dir = args.log_dir;
  options.prefix_output = !args.no_prefix;
  if (!(args.grace_seconds >= 0)) {
    return invalid_argument("--grace " + std::to_string(args.grace_seconds) + " must be >= 0");
  }
  options.grace = std::chrono::milliseconds(static_cast<long long>(args.grace_seconds * 1000));
  options.restart_on_failure = args.restart_on_failure;
  if (args.max_restarts && !args.restart_on_failure) {
    return invalid_argument("--max-restarts " + std::to_string(*args.max_restarts) +
                            " needs --restart-on-failure: add it, or drop --max-restarts");
  }
  options.max_restarts = args.max_restarts.value_or(options.max_restarts);
  options.replace_failed = args.replace_failed;
  if (!args.ranks.empty()) {
    NTP_ASSIGN_OR_RETURN(options.ranks, parse_ranks(args.ranks));
  }
  options.local_addr = args.local_addr;
  options.domain_size = args.domain_size;
  options.domain_store = args.domain_store;
  options.command = args.command;
  return options;
}

void add_comm_worker_command(CLI::App& app, int& exit_code) {
  auto options = std::make_shared<launch::CommWorkerOptions>();
  auto timeout_ms = std::make_shared<long long>(2000);
  auto step_ms = std::make_shared<long long>(20);
  CLI::App* cmd = app.add_subcommand(
      "comm-worker",
      "Test worker for `ntp launch`: allreduce steps that survive dead peers (see docs/launch.md)");
  cmd->group("");  // hidden from `ntp --help`
  cmd->add_option("--steps", options->steps, "Steps to run")->check(CLI::NonNegativeNumber);
  cmd->add_option("--elements", options->elements, "float32 elements per allreduce");
  cmd->add_option("--timeout-ms", *timeout_ms, "Communicator timeout")->check(CLI::PositiveNumber);
  cmd->add_option("--step-ms", *step_ms, "Pause between steps")->check(CLI::NonNegativeNumber);
  cmd->add_option("--min-world", options->min_world, "Fail when fewer workers remain")
      ->check(CLI::PositiveNumber);
  cmd->callback([&exit_code, options, timeout_ms, step_ms] {
    options->timeout = std::chrono::milliseconds(*timeout_ms);
    options->step_time = std::chrono::milliseconds(*step_ms);
    exit_code = launch::run_comm_worker(*options);
  });
}

}  // namespace

void add_launch_command(CLI::App& app, int& exit_code) {
  auto args = std::make_shared<LaunchArgs>();
  CLI::App* cmd = app.add_subcommand(
      "launch",
      "Start, watch and (for tests) break worker processes: ntp launch --nproc-per-node N -- "
      "ntp <subcommand> ...");
  // Range checked by run_launch, whose message says what is allowed.
  cmd->add_option("--nproc-per-node", args->nproc_per_node, "Workers on this node (at least 1)")
      ->required();
  cmd->add_option("--nnodes", args->nnodes,
                  "Number of nodes (default: Slurm/Open MPI variables, else 1)");
  cmd->add_option("--node-rank", args->node_rank,
                  "This node's index (default: Slurm/Open MPI variables, else 0)");
  cmd->add_option("--store", args->store,
                  "Rendezvous store: file:DIR (default file:$TMPDIR/ntp-store) or "
                  "redis://[:PASSWORD@]HOST:PORT");
  cmd->add_option("--run-id", args->run_id, "Namespaces the store keys (default: generated)");
  cmd->add_option("--inject", args->inject,
                  "Fault (repeatable): kill|hang|repair:rank=R,at=STEP or at=SECONDSs; "
                  "stall:rank=R,at=STEP (the worker's training thread blocks forever at that "
                  "step, its process lives on); slow:rank=R,factor=F,at=WHEN[,until=STEP] (the "
                  "worker runs at about F of its speed, 0 < F <= 1: SIGSTOP/SIGCONT duty cycle "
                  "every 20 ms, to step until= or the end)")
      ->allow_extra_args(false);
  cmd->add_option("--chaos", args->chaos,
                  "Random faults: SEED,RATE: kills/hangs and slowdowns at RATE per second each, "
                  "stalls armed in a quarter of the workers started; reproducible from SEED");
  cmd->add_option("--log-dir", args->log_dir, "Also write each worker's output to DIR/rank_R.log");
  cmd->add_flag("--no-prefix", args->no_prefix, "Do not prefix worker lines with [rank R]");
  cmd->add_option("--grace", args->grace_seconds,
                  "Seconds between SIGTERM and SIGKILL when stopping workers (default 3)");
  cmd->add_flag("--restart-on-failure", args->restart_on_failure,
                "When a worker dies, stop the others and restart the job on the surviving slots "
                "(NTP_ATTEMPT, NTP_LOST_RANKS)");
  cmd->add_option("--max-restarts", args->max_restarts,
                  "Restarts allowed with --restart-on-failure before giving up (default 3)");
  cmd->add_option("--replace-failed", args->replace_failed,
                  "Replace a worker that fails or is fenced by a fresh one (NTP_RESTART_COUNT + 1) "
                  "that rejoins the running job, at most N times per slot (default 0: never)");
  cmd->add_option("--ranks", args->ranks,
                  "Global ranks of this node's workers, comma-separated in local order (default "
                  "node_rank * nproc_per_node + local)");
  cmd->add_option("--local-addr", args->local_addr,
                  "Address of this machine the workers listen on for collectives, reachable from "
                  "the other nodes (NTP_LOCAL_ADDR; default 127.0.0.1)");
  cmd->add_option("--domain-size", args->domain_size,
                  "Slots per scale-up domain (the job's --tp): each worker gets its domain's "
                  "store (NTP_DOMAIN_STORE, NTP_DOMAIN_SIZE) and its exit notice goes there too, "
                  "for the domain hierarchy's watch (docs/launch.md); 0: none");
  cmd->add_option("--domain-store", args->domain_store,
                  "The domains' store, \"{domain}\" replaced by the domain's index for one store "
                  "per domain (file:DIR/{domain}, redis://rack{domain}-store:6379); default: "
                  "--store, a namespace per domain");
  cmd->add_option("command", args->command, "Worker command after --, e.g. -- ntp comm-worker")
      ->required();
  cmd->callback([&exit_code, args] {
    Result<launch::LaunchOptions> options = to_options(*args);
    if (!options.ok()) {
      exit_code = report_error("launch", options.status());
      return;
    }
    Result<int> code = launch::run_launch(*options);
    exit_code = code.ok() ? *code : report_error("launch", code.status());
  });
  add_comm_worker_command(app, exit_code);
}

}  // namespace ntp::cli
