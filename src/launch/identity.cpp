#include "launch/identity.h"

#include <algorithm>
#include <cstdlib>

namespace ntp::launch {
namespace {

std::optional<int> to_int(const std::optional<std::string>& text) {
  if (!text) return std::nullopt;
  try {
    std::size_t used = 0;
    const int value = std::stoi(*text, &used);
    if (used != text->size()) return std::nullopt;
    return value;
  } catch (const std::exception&) {
    return std::nullopt;
  }
}

// NTP_DOMAIN_SIZE and NTP_DOMAIN_STORE: both or neither; the size divides the world.
Status read_domain(const EnvLookup& env, WorkerIdentity& id) {
  const std::optional<std::string> size = env("NTP_DOMAIN_SIZE");
  const std::optional<std::string> store = env("NTP_DOMAIN_STORE");
  if (!size && !store) return ok_status();
  if (!size || !store || store->empty()) {
    return failed_precondition(
        "NTP_DOMAIN_SIZE and NTP_DOMAIN_STORE come together (`ntp launch --domain-size`); one is "
        "missing");
  }
  const std::optional<int> value = to_int(size);
  if (!value || *value < 1 || id.world_size % *value != 0) {
    return failed_precondition("NTP_DOMAIN_SIZE '" + *size +
                               "' is not a count >= 1 that divides NTP_WORLD_SIZE " +
                               std::to_string(id.world_size));
  }
  id.domain_size = *value;
  id.domain_store = *store;
  return ok_status();
}

}  // namespace

EnvLookup process_env() {
  return [](const std::string& name) -> std::optional<std::string> {
    const char* value = std::getenv(name.c_str());
    if (value == nullptr) return std::nullopt;
    return std::string(value);
  };
}

Result<NodeIdentity> resolve_node_identity(std::optional<int> nnodes_flag,
                                           std::optional<int> node_rank_flag,
                                           const EnvLookup& env) {
  NodeIdentity id;
  std::optional<int> nnodes = nnodes_flag;
  std::optional<int> node_rank = node_rank_flag;
  id.source = "flags";
  if (!nnodes || !node_rank) {
    std::optional<int> env_nnodes;
    std::optional<int> env_rank;
    std::string source;
    if (env("SLURM_NODEID")) {
      env_rank = to_int(env("SLURM_NODEID"));
      env_nnodes = to_int(env("SLURM_NNODES"));
      if (!env_nnodes) env_nnodes = to_int(env("SLURM_JOB_NUM_NODES"));
      source = "slurm";
    } else if (env("OMPI_COMM_WORLD_RANK")) {
      env_rank = to_int(env("OMPI_COMM_WORLD_RANK"));
      env_nnodes = to_int(env("OMPI_COMM_WORLD_SIZE"));
      source = "openmpi";
    }
    if (!nnodes && env_nnodes) nnodes = env_nnodes;
    if (!node_rank && env_rank) node_rank = env_rank;
    id.source = source.empty() ? "default" : source;
  }
  id.nnodes = nnodes.value_or(1);
  id.node_rank = node_rank.value_or(0);
  if (id.nnodes < 1) {
    return invalid_argument("--nnodes " + std::to_string(id.nnodes) + " (from " + id.source +
                            ") must be >= 1");
  }
  if (id.node_rank < 0 || id.node_rank >= id.nnodes) {
    return invalid_argument("--node-rank " + std::to_string(id.node_rank) + " (from " + id.source +
                            ") must be in [0, " + std::to_string(id.nnodes) +
                            "); pass --nnodes and --node-rank consistently");
  }
  return id;
}

std::string join_ranks(const std::vector<int>& ranks) {
  std::string text;
  for (int rank : ranks) text += (text.empty() ? "" : ",") + std::to_string(rank);
  return text;
}

std::vector<std::string> worker_env_entries(const WorkerIdentity& id) {
  std::vector<std::string> entries = {
      "NTP_RANK=" + std::to_string(id.rank),
      "NTP_WORLD_SIZE=" + std::to_string(id.world_size),
      "NTP_LOCAL_RANK=" + std::to_string(id.local_rank),
      "NTP_LOCAL_WORLD_SIZE=" + std::to_string(id.local_world_size),
      "NTP_NODE_RANK=" + std::to_string(id.node_rank),
      "NTP_NNODES=" + std::to_string(id.nnodes),
      "NTP_STORE=" + id.store,
      "NTP_RUN_ID=" + id.run_id,
      "NTP_RESTART_COUNT=" + std::to_string(id.restart_count),
      "NTP_ATTEMPT=" + std::to_string(id.attempt),
      "NTP_LOST_RANKS=" + join_ranks(id.lost_ranks),
  };
  if (!id.local_addr.empty()) entries.push_back("NTP_LOCAL_ADDR=" + id.local_addr);
  if (id.domain_size > 0) {
    entries.push_back("NTP_DOMAIN_SIZE=" + std::to_string(id.domain_size));
    entries.push_back("NTP_DOMAIN_STORE=" + id.domain_store);
  }
  return entries;
}

Result<WorkerIdentity> worker_identity_from_env(const EnvLookup& env) {
  WorkerIdentity id;
  struct IntVar {
    const char* name;
    int* field;
  };
  const IntVar ints[] = {{"NTP_RANK", &id.rank},
                         {"NTP_WORLD_SIZE", &id.world_size},
                         {"NTP_LOCAL_RANK", &id.local_rank},
                         {"NTP_LOCAL_WORLD_SIZE", &id.local_world_size},
                         {"NTP_NODE_RANK", &id.node_rank},
                         {"NTP_NNODES", &id.nnodes},
                         {"NTP_RESTART_COUNT", &id.restart_count}};
  for (const IntVar& var : ints) {
    std::optional<int> value = to_int(env(var.name));
    if (!value) {
      return failed_precondition(std::string(var.name) +
                                 " is missing or not an integer: start workers with `ntp launch`");
    }
    *var.field = *value;
  }
  std::optional<std::string> store = env("NTP_STORE");
  std::optional<std::string> run_id = env("NTP_RUN_ID");
  if (!store || !run_id) {
    return failed_precondition("NTP_STORE/NTP_RUN_ID missing: start workers with `ntp launch`");
  }
  id.store = *store;
  id.run_id = *run_id;
  id.local_addr = env("NTP_LOCAL_ADDR").value_or("");
  if (std::optional<std::string> attempt = env("NTP_ATTEMPT")) {
    std::optional<int> value = to_int(attempt);
    if (!value || *value < 0) {
      return failed_precondition("NTP_ATTEMPT '" + *attempt + "' is not a count >= 0");
    }
    id.attempt = *value;
  }
  if (std::optional<std::string> lost = env("NTP_LOST_RANKS"); lost && !lost->empty()) {
    std::size_t begin = 0;
    for (;;) {
      const std::size_t comma = lost->find(',', begin);
      const std::string item =
          lost->substr(begin, comma == std::string::npos ? std::string::npos : comma - begin);
      std::optional<int> rank = to_int(item);
      if (!rank || *rank < 0 || *rank >= id.world_size) {
        return failed_precondition("NTP_LOST_RANKS '" + *lost + "' has '" + item +
                                   "', not a rank below NTP_WORLD_SIZE");
      }
      id.lost_ranks.push_back(*rank);
      if (comma == std::string::npos) break;
      begin = comma + 1;
    }
    std::sort(id.lost_ranks.begin(), id.lost_ranks.end());
  }
  if (id.rank < 0 || id.rank >= id.world_size) {
    return failed_precondition("NTP_RANK " + std::to_string(id.rank) +
                               " is outside NTP_WORLD_SIZE " + std::to_string(id.world_size));
  }
  NTP_RETURN_IF_ERROR(read_domain(env, id));
  return id;
}

std::string domain_store_spec(const std::string& spec, int domain) {
  static const std::string kField = "{domain}";
  std::string out = spec;
  for (std::size_t at = out.find(kField); at != std::string::npos; at = out.find(kField, at + 1)) {
    out.replace(at, kField.size(), std::to_string(domain));
  }
  return out;
}

std::string domain_namespace(const std::string& run_id, int domain) {
  return run_id + ".domain" + std::to_string(domain);
}

Result<std::shared_ptr<comm::Store>> open_domain_store(const WorkerIdentity& id) {
  if (id.domain_size <= 0) {
    return failed_precondition(
        "this worker has no domain store: start it with `ntp launch --domain-size N`");
  }
  return comm::open_store(id.domain_store, domain_namespace(id.run_id, id.domain()));
}

}  // namespace ntp::launch
