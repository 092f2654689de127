// Who a worker is: the environment `ntp launch` gives each worker, and where the launcher's own
// node identity comes from.
//
// Worker environment (docs/launch.md):
//   NTP_RANK           global rank, node_rank * nproc_per_node + local_rank
//   NTP_WORLD_SIZE     nnodes * nproc_per_node
//   NTP_LOCAL_RANK     index on this node, 0..nproc_per_node-1
//   NTP_LOCAL_WORLD_SIZE nproc_per_node
//   NTP_NODE_RANK      this node's index, 0..nnodes-1
//   NTP_NNODES         number of nodes
//   NTP_STORE          store spec (file:DIR or redis://HOST:PORT; a password is passed in
//                      NTP_REDIS_PASSWORD, never in NTP_STORE)
//   NTP_RUN_ID         run id namespacing the store
//   NTP_RESTART_COUNT  0 for the first worker of a slot, k for its k-th replacement (repair)
//   NTP_ATTEMPT        0 for the job's first start, k for its k-th restart (--restart-on-failure)
//   NTP_LOST_RANKS     comma-separated global ranks whose slots failed so far (empty at attempt 0)
//   NTP_LOCAL_ADDR     the address this node's workers listen on for collectives (`ntp launch
//                      --local-addr`); absent when not given (workers then use 127.0.0.1)
//   NTP_DOMAIN_SIZE    slots per scale-up domain (`ntp launch --domain-size`): the worker's domain
//                      is NTP_RANK / NTP_DOMAIN_SIZE, its slot there NTP_RANK % NTP_DOMAIN_SIZE;
//                      absent when not given (no domain stores)
//   NTP_DOMAIN_STORE   its domain's store spec (`--domain-store`, "{domain}" replaced), its keys
//                      under "<NTP_RUN_ID>.domain<D>" (open_domain_store); set with the size
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "comm/store.h"
#include "core/status.h"

namespace ntp::launch {

struct NodeIdentity {
  int nnodes = 1;
  int node_rank = 0;
  std::string source;  // "flags", "slurm", "openmpi" or "default"
};

using EnvLookup = std::function<std::optional<std::string>(const std::string&)>;

// The process environment as an EnvLookup.
EnvLookup process_env();

// Node identity from the flags when given, else from Slurm (SLURM_NODEID, SLURM_NNODES or
// SLURM_JOB_NUM_NODES), else from Open MPI when the launcher itself runs one per node under
// mpirun (OMPI_COMM_WORLD_RANK, OMPI_COMM_WORLD_SIZE), else a single node.
Result<NodeIdentity> resolve_node_identity(std::optional<int> nnodes_flag,
                                           std::optional<int> node_rank_flag, const EnvLookup& env);

struct WorkerIdentity {
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;
  int local_world_size = 1;
  int node_rank = 0;
  int nnodes = 1;
  std::string store;
  std::string run_id;
  int restart_count = 0;
  int attempt = 0;              // NTP_ATTEMPT; 0 when missing (older launchers)
  std::vector<int> lost_ranks;  // NTP_LOST_RANKS, ascending; empty when missing
  std::string local_addr;       // NTP_LOCAL_ADDR; empty when missing (listen on 127.0.0.1)
  int domain_size = 0;          // NTP_DOMAIN_SIZE; 0 when missing (no domain stores)
  std::string domain_store;     // NTP_DOMAIN_STORE, this worker's domain's (no password)

  int domain() const { return domain_size > 0 ? rank / domain_size : 0; }
  int domain_slot() const { return domain_size > 0 ? rank % domain_size : rank; }
};

// The hierarchy's domain stores (docs/design/control-plane-hierarchy.md): every scale-up domain's
// members, and the launchers of their nodes, share a store of the domain's, apart from the job's.
// `spec` with each "{domain}" replaced by `domain` (one store per domain: file:/x/{domain},
// redis://rack{domain}-store:6379); a spec without it serves every domain of the job.
std::string domain_store_spec(const std::string& spec, int domain);
// The namespace of `domain`'s keys on its store, "<run_id>.domain<D>": domains that share a
// store do not share keys (each has its own exit notices, "launch/exit/<slot>").
std::string domain_namespace(const std::string& run_id, int domain);
// The worker's domain store (kFailedPrecondition when the launcher gave it none).
Result<std::shared_ptr<comm::Store>> open_domain_store(const WorkerIdentity& id);

// "0,6": ranks as NTP_LOST_RANKS lists them.
std::string join_ranks(const std::vector<int>& ranks);

// "NAME=value" entries for a worker's environment.
std::vector<std::string> worker_env_entries(const WorkerIdentity& id);

// A worker reads its identity back (kFailedPrecondition naming the missing variable when it was
// not started by `ntp launch`). NTP_ATTEMPT and NTP_LOST_RANKS are optional (0 and empty when
// missing); when present they must be well formed.
Result<WorkerIdentity> worker_identity_from_env(const EnvLookup& env);

}  // namespace ntp::launch
