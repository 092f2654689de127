// The job of one `ntp launch`: its main loop, which relays output, reaps workers, carries out
// faults and replacements, and ends the job (launch/launcher.h states the contracts). Each
// concern lives in a file of its own: worker_process (spawn and reap), output_relay,
// fault_injector and duty_cycle (faults and chaos), replacement (replacement and restart),
// store_channel (every store call, on a thread of its own), launch_summary (the exit code).
#pragma once

#include <csignal>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "comm/store.h"
#include "launch/identity.h"
#include "launch/launcher.h"

namespace ntp::launch {

struct LaunchSetup {
  LaunchOptions options;  // validated
  NodeIdentity node;
  std::shared_ptr<comm::Store> store;
  std::string spec;          // the store as given (with its password): opened again after outages
  std::string worker_store;  // the store spec workers see (no password)
  std::string password;
  std::string run_id;
  // The domains of this node's workers (options.domain_size > 0): each one's store, opened under
  // domain_namespace, and its spec as given (opened again after outages).
  struct DomainStore {
    std::shared_ptr<comm::Store> store;
    std::string spec;
  };
  std::map<int, DomainStore> domain_stores;
  std::string worker_domain_store;  // the spec workers see (no password, "{domain}" kept)
};

// Global ranks of this node's workers in local order (LaunchOptions::ranks, or node_rank *
// nproc_per_node + local).
std::vector<int> local_ranks(const LaunchOptions& options, const NodeIdentity& node);

// Runs the job to its end and returns the launcher's exit code. `stop_signal` is set (to the
// signal number) by the launcher's SIGINT/SIGTERM handler.
int run_job(LaunchSetup setup, const volatile std::sig_atomic_t& stop_signal);

}  // namespace ntp::launch
