// The launcher behind `ntp launch`: starts nproc_per_node workers on this node, watches them,
// relays their output, injects faults, and stops all of them on SIGINT/SIGTERM.
//
// Contracts:
// * Each worker runs in its own process group (so a fault or a stop reaches its children too)
//   and dies with the launcher (PR_SET_PDEATHSIG). On SIGINT/SIGTERM the launcher sends SIGTERM
//   (and SIGCONT, so hung workers can act on it) to every group, SIGKILLs what is left after
//   `grace`, reaps everything and returns 128 + the signal number.
// * The launcher returns only once every process of every worker's group is gone: a worker's
//   group is SIGKILLed when the worker exits, and the launcher is the child subreaper of the
//   orphans this leaves, so it reaps them itself (no zombie left to init).
// * Each output line of worker R goes to the launcher's stdout/stderr (matching the stream) as
//   "[rank R] line" (without the prefix if prefix_output is false), and to LOG_DIR/rank_R.log when
//   a log directory is given.
// * Exit code (launch/launch_summary.h): 0 when a worker of this node reported that the job
//   trained to its last step (launch::report_finished), whatever happened to workers lost on
//   the way; otherwise the code of the first slot whose last worker failed and was not hit by an
//   injected fault (128 + signal when it was killed by a signal); otherwise 1 when the workers
//   reported steps and some were lost but none reported the end; else 0. The last lines name
//   every lost worker and how it ended.
//   With restart_on_failure a failed slot is lost for the rest of the run (its device is
//   considered gone) and does not count; the job fails when max_restarts is exceeded (the code
//   of the failure that exceeded it) or no slot is left.
//   Workers hit by kill/hang/stall are expected casualties; a hung or stalled worker is
//   SIGKILLed once every other worker has finished. A slowed worker is always left running
//   (SIGCONT) when its slowdown ends, before it is killed, hung or repaired, and on a stop.
// * Every store call runs on a thread of its own (launch/store_channel.h): a store outage never
//   stops the relaying of output, the reaping of workers or the injection of faults.
// * With replace_failed > 0 a worker that fails (non-zero exit or a signal, not an injected
//   fault) or is fenced out of a job that goes on (exit 0 after launch::report_left) is replaced
//   by a fresh worker for its slot, NTP_RESTART_COUNT + 1, after a backoff (0.5 s doubling to
//   8 s), at most replace_failed times per slot. While the store does not answer (a node cut off
//   by a network partition) the replacement is held and the store retried every second, for at
//   most 10 minutes; a replacement needs the store to ask to join. Only the last worker of a slot
//   counts for the exit code.
// * With domain_size > 0 a worker's exit notice (comm/exit_notice.h) goes to the job's store
//   under its rank and to its domain's store under its slot in the domain, through a store
//   channel of the domain's own (an outage of one store holds no other's notices).
#pragma once

#include <chrono>
#include <optional>
#include <string>
#include <vector>

#include "core/status.h"
#include "launch/fault_spec.h"

namespace ntp::launch {

struct LaunchOptions {
  int nproc_per_node = 1;
  std::optional<int> nnodes;     // else Slurm / Open MPI / 1
  std::optional<int> node_rank;  // else Slurm / Open MPI / 0
  std::string store;             // empty: file:$TMPDIR/ntp-store
  std::string run_id;            // empty: generated
  std::vector<FaultSpec> faults;
  std::optional<ChaosSpec> chaos;
  std::string log_dir;  // empty: no log files
  bool prefix_output = true;
  std::chrono::milliseconds grace{3000};
  // When a worker dies unexpectedly (non-zero exit or a signal, an injected kill included), stop
  // the others and start the job again on the surviving slots only, with NTP_ATTEMPT and
  // NTP_LOST_RANKS set; at most max_restarts times, then return the failing code.
  bool restart_on_failure = false;
  int max_restarts = 3;
  // Replace failed or fenced workers in place (see above); 0 = never. Not with restart_on_failure.
  int replace_failed = 0;
  // Global ranks of this node's workers in local order; empty = node_rank * nproc_per_node +
  // local. Lets one node hold slots of several replicas (two TP-2 replicas over two nodes:
  // --ranks 0,3 and --ranks 1,2), so that losing a node leaves every replica running.
  std::vector<int> ranks;
  // The address this node's workers listen on for collectives, passed as NTP_LOCAL_ADDR; must be
  // an address of this machine that the other nodes reach. Empty: not set (127.0.0.1).
  std::string local_addr;
  // The hierarchy's domain stores (launch/identity.h): with domain_size > 0 the job's ranks form
  // scale-up domains of that many slots; each worker gets its domain's store (NTP_DOMAIN_STORE,
  // NTP_DOMAIN_SIZE), and the launcher posts a worker's exit notice there as well (under its
  // slot in the domain), where its domain's failure watch reads it. domain_store: a spec with
  // "{domain}" for one store per domain; empty: the job's store (a namespace per domain).
  int domain_size = 0;
  std::string domain_store;
  std::vector<std::string> command;  // argv; "ntp" means this very binary
};

// Runs the job to completion and returns the launcher's exit code (see above). kInvalidArgument
// for bad options (nothing was started).
Result<int> run_launch(const LaunchOptions& options);

}  // namespace ntp::launch
