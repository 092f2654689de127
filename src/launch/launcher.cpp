#include "launch/launcher.h"

#include <netdb.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <filesystem>

#include "comm/store.h"
#include "core/rng.h"
#include "launch/identity.h"
#include "launch/launch_job.h"

namespace ntp::launch {
namespace {

volatile std::sig_atomic_t g_stop_signal = 0;

extern "C" void on_stop_signal(int signo) { g_stop_signal = signo; }

// Whether `addr` is an address of this machine: a socket can listen on it.
bool is_local_address(const std::string& addr) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE;
  addrinfo* found = nullptr;
  if (::getaddrinfo(addr.c_str(), "0", &hints, &found) != 0) return false;
  bool bound = false;
  for (addrinfo* a = found; a != nullptr && !bound; a = a->ai_next) {
    const int fd = ::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) continue;
    bound = ::bind(fd, a->ai_addr, a->ai_addrlen) == 0;
    ::close(fd);
  }
  ::freeaddrinfo(found);
  return bound;
}

std::string generated_run_id() {
  const auto now = std::chrono::system_clock::now().time_since_epoch().count();
  const std::uint64_t mix =
      splitmix64(static_cast<std::uint64_t>(now) ^ (static_cast<std::uint64_t>(::getpid()) << 32));
  char text[32];
  std::snprintf(text, sizeof(text), "run-%012llx",
                static_cast<unsigned long long>(mix & 0xFFFFFFFFFFFFULL));
  return text;
}

// The store spec workers see: a password stays out of NTP_STORE (it would show in `ps e`).
std::string strip_password(const std::string& spec, std::string* password) {
  if (spec.rfind("redis://", 0) != 0) return spec;
  const std::string rest = spec.substr(8);
  const auto at = rest.rfind('@');
  if (at == std::string::npos) return spec;
  const std::string auth = rest.substr(0, at);
  *password = !auth.empty() && auth[0] == ':' ? auth.substr(1) : auth;
  return "redis://" + rest.substr(at + 1);
}

// --domain-size and --domain-store against the job (before any store is opened). `password`: the
// job store's, which the workers get.
Status check_domain_options(const LaunchOptions& options, int world, const std::string& job_spec,
                            const std::string& password) {
  if (options.domain_size == 0) {
    if (options.domain_store.empty()) return ok_status();
    return invalid_argument("--domain-store " + options.domain_store +
                            " needs --domain-size (the slots of a scale-up domain): add it");
  }
  if (options.domain_size < 0 || world % options.domain_size != 0) {
    return invalid_argument("--domain-size " + std::to_string(options.domain_size) +
                            " must be at least 1 and divide the job's " + std::to_string(world) +
                            " ranks (--nnodes x --nproc-per-node) into whole domains");
  }
  std::string domain_password;
  (void)strip_password(options.domain_store.empty() ? job_spec : options.domain_store,
                       &domain_password);
  if (!domain_password.empty() && domain_password != password) {
    return invalid_argument(
        "--domain-store has a password other than --store's: workers get one "
        "(NTP_REDIS_PASSWORD); give the domain stores the job store's password, or none");
  }
  return ok_status();
}

// Opens the store of every domain of this node's workers into `setup` (checked options): a store
// that does not answer is an error before any worker starts, as the job's own is.
Status open_domain_stores(const LaunchOptions& options, const std::string& job_spec,
                          LaunchSetup& setup) {
  if (options.domain_size == 0) return ok_status();
  const std::string spec = options.domain_store.empty() ? job_spec : options.domain_store;
  std::string password;
  setup.worker_domain_store = strip_password(spec, &password);
  for (int rank : local_ranks(options, setup.node)) {
    const int domain = rank / options.domain_size;
    if (setup.domain_stores.count(domain) > 0) continue;
    const std::string domain_spec = domain_store_spec(spec, domain);
    NTP_ASSIGN_OR_RETURN(std::shared_ptr<comm::Store> store,
                         comm::open_store(domain_spec, domain_namespace(setup.run_id, domain)));
    setup.domain_stores[domain] = {std::move(store), domain_spec};
  }
  return ok_status();
}

}  // namespace

Result<int> run_launch(const LaunchOptions& options) {
  if (options.nproc_per_node < 1) {
    return invalid_argument("--nproc-per-node " + std::to_string(options.nproc_per_node) +
                            " must be at least 1 (the number of workers on this node)");
  }
  if (options.command.empty()) {
    return invalid_argument("no worker command: use `ntp launch [options] -- COMMAND ...`");
  }
  if (options.max_restarts < 0) {
    return invalid_argument("--max-restarts " + std::to_string(options.max_restarts) +
                            " must be at least 0");
  }
  if (options.replace_failed < 0) {
    return invalid_argument("--replace-failed " + std::to_string(options.replace_failed) +
                            " must be at least 0 (replacements per slot)");
  }
  if (options.replace_failed > 0 && options.restart_on_failure) {
    return invalid_argument(
        "--replace-failed cannot be combined with --restart-on-failure: one replaces a failed "
        "worker in the running job, the other restarts the job without its slot; drop one");
  }
  if (!options.local_addr.empty() && !is_local_address(options.local_addr)) {
    return invalid_argument("--local-addr " + options.local_addr +
                            " is not an address of this machine (nothing can listen on it); "
                            "give one of its addresses that the other nodes reach");
  }
  for (const FaultSpec& fault : options.faults) {
    if (options.restart_on_failure && fault.kind == FaultKind::kRepair) {
      return invalid_argument(
          "--inject repair:rank=" + std::to_string(fault.rank) +
          " cannot be combined with --restart-on-failure (a failed slot is lost for the run): "
          "drop one of them");
    }
  }
  NTP_ASSIGN_OR_RETURN(NodeIdentity node,
                       resolve_node_identity(options.nnodes, options.node_rank, process_env()));
  const int world = node.nnodes * options.nproc_per_node;
  if (!options.ranks.empty()) {
    if (static_cast<int>(options.ranks.size()) != options.nproc_per_node) {
      return invalid_argument("--ranks " + join_ranks(options.ranks) + " names " +
                              std::to_string(options.ranks.size()) + " ranks for " +
                              std::to_string(options.nproc_per_node) +
                              " workers (--nproc-per-node): give one global rank per worker");
    }
    std::vector<int> sorted = options.ranks;
    std::sort(sorted.begin(), sorted.end());
    if (sorted.front() < 0 || sorted.back() >= world) {
      return invalid_argument("--ranks " + join_ranks(options.ranks) + " must lie in [0, " +
                              std::to_string(world) + ") (--nnodes x --nproc-per-node)");
    }
    if (std::adjacent_find(sorted.begin(), sorted.end()) != sorted.end()) {
      return invalid_argument("--ranks " + join_ranks(options.ranks) +
                              " names a rank twice: each worker needs its own");
    }
  }
  for (const FaultSpec& fault : options.faults) {
    if (fault.rank >= world) {
      return invalid_argument("--inject " + std::string(fault_kind_name(fault.kind)) +
                              ":rank=" + std::to_string(fault.rank) + " is outside the world of " +
                              std::to_string(world) + " ranks; use a rank below " +
                              std::to_string(world));
    }
  }
  if (options.store.empty() && node.nnodes > 1) {
    return invalid_argument("--nnodes " + std::to_string(node.nnodes) + " (from " + node.source +
                            ") needs a store every node reaches: pass --store "
                            "redis://HOST:PORT or --store file:DIR on a shared file system");
  }
  const std::string run_id = options.run_id.empty() ? generated_run_id() : options.run_id;
  std::string spec = options.store;
  if (spec.empty()) {
    const char* tmp = std::getenv("TMPDIR");
    spec = std::string("file:") + (tmp != nullptr ? tmp : "/tmp") + "/ntp-store";
  }
  std::string password;
  const std::string worker_store = strip_password(spec, &password);
  NTP_RETURN_IF_ERROR(check_domain_options(options, world, spec, password));
  NTP_ASSIGN_OR_RETURN(std::shared_ptr<comm::Store> store, comm::open_store(spec, run_id));
  LaunchSetup setup{options, node, store, spec, worker_store, password, run_id, {}, {}};
  NTP_RETURN_IF_ERROR(open_domain_stores(options, spec, setup));

  struct sigaction action {};
  action.sa_handler = on_stop_signal;
  sigemptyset(&action.sa_mask);
  struct sigaction old_int {};
  struct sigaction old_term {};
  ::sigaction(SIGINT, &action, &old_int);
  ::sigaction(SIGTERM, &action, &old_term);
  g_stop_signal = 0;

  // Orphans of the workers (a worker's children once it died) are reparented to the launcher,
  // which reaps them: it returns only when every process of every worker group is gone.
  int old_subreaper = 0;
  ::prctl(PR_GET_CHILD_SUBREAPER, &old_subreaper);
  ::prctl(PR_SET_CHILD_SUBREAPER, 1);
  std::vector<int> domains;
  for (const auto& entry : setup.domain_stores) domains.push_back(entry.first);
  const int code = run_job(std::move(setup), g_stop_signal);
  ::prctl(PR_SET_CHILD_SUBREAPER, old_subreaper);
  if (options.store.empty()) {
    // The default store is private to this launch: leave nothing behind in $TMPDIR (the domains'
    // namespaces on it included, when they are there).
    std::error_code ec;
    std::filesystem::remove_all(spec.substr(5) + "/" + run_id, ec);
    if (options.domain_store.empty()) {
      for (int d : domains)
        std::filesystem::remove_all(spec.substr(5) + "/" + domain_namespace(run_id, d), ec);
    }
  }

  ::sigaction(SIGINT, &old_int, nullptr);
  ::sigaction(SIGTERM, &old_term, nullptr);
  return code;
}

}  // namespace ntp::launch
