#include "cli/hierarchy_worker_run.h"

#include <cstdio>
#include <memory>
#include <string>
#include <thread>

#include "comm/exit_notice.h"
#include "comm/store.h"
#include "elastic/hierarchy_runtime.h"
#include "elastic/member_list.h"
#include "launch/identity.h"
#include "launch/step_report.h"

namespace ntp::cli {
namespace {

using Clock = std::chrono::steady_clock;

constexpr const char* kReadyKey = "hierarchy/ready";
constexpr const char* kFinishedKey = "hierarchy/finished";
constexpr std::chrono::seconds kStartWait{60};
constexpr std::chrono::seconds kEndWait{10};

// Counts this worker in under `key` and waits until `target` did (false: not within `limit`).
bool count_in_and_wait(comm::Store& store, const char* key, long long target,
                       std::chrono::seconds limit) {
  if (!store.add(key, 1).ok()) return false;
  const Clock::time_point end = Clock::now() + limit;
  while (Clock::now() < end) {
    const Result<std::int64_t> count = store.add(key, 0);
    if (count.ok() && *count >= target) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return false;
}

elastic::HierarchyRuntimeSetup runtime_setup(const launch::WorkerIdentity& id,
                                             const HierarchyWorkerOptions& options,
                                             std::shared_ptr<comm::Store> global,
                                             std::shared_ptr<comm::Store> domain) {
  elastic::HierarchyRuntimeSetup setup;
  elastic::HierarchyMemberParams& m = setup.member;
  m.global_group = "hierarchy/g";
  m.domain_group = "hierarchy/d" + std::to_string(id.domain());
  m.domain = id.domain();
  m.slot = id.domain_slot();
  m.domain_size = id.domain_size;
  m.domain_count = id.world_size / id.domain_size;
  m.hang_detect = options.hang_detect;
  m.global_hang_detect = options.global_hang_detect;
  m.encode_layout = [] { return std::string("none"); };  // no training state to lay out
  setup.domain_store = std::move(domain);
  setup.global_store = std::move(global);
  return setup;  // no `form`: it trains on each full list at once (no groups to build)
}

}  // namespace

int run_hierarchy_worker(const HierarchyWorkerOptions& options) {
  const Result<launch::WorkerIdentity> id = launch::worker_identity_from_env(launch::process_env());
  Result<std::shared_ptr<comm::Store>> global =
      id.ok() ? comm::open_store(id->store, id->run_id)
              : Result<std::shared_ptr<comm::Store>>(id.status());
  Result<std::shared_ptr<comm::Store>> domain =
      global.ok() ? launch::open_domain_store(*id)
                  : Result<std::shared_ptr<comm::Store>>(global.status());
  if (!domain.ok()) {
    std::fprintf(stderr, "ntp hierarchy-worker: error: %s\n", domain.status().message().c_str());
    return 2;
  }
  const std::string me = "rank " + std::to_string(id->rank);
  elastic::HierarchyRuntime runtime(runtime_setup(*id, options, *global, *domain));
  // Every member beats before any watch looks (its heartbeat started with the runtime).
  if (!count_in_and_wait(**global, kReadyKey, id->world_size, kStartWait)) {
    std::fprintf(stderr, "%s: the job's %d workers did not all start within %lld s\n", me.c_str(),
                 id->world_size, static_cast<long long>(kStartWait.count()));
    return 4;
  }
  runtime.start();
  int reported = 0;
  for (long long step = 0; step < options.steps; ++step) {
    (void)launch::report_step(**global, id->rank, step);
    if (runtime.left()) {
      std::printf("%s: declared dead, leaving the job\n", me.c_str());
      return 3;
    }
    if (const std::string error = runtime.error(); !error.empty()) {
      std::fprintf(stderr, "%s: %s\n", me.c_str(), error.c_str());
      return 2;
    }
    const std::shared_ptr<const elastic::MemberList> list = runtime.training_on();
    if (list && runtime.reformations() != reported) {
      reported = runtime.reformations();
      std::printf("%s: reformed %d: epoch %d, members [%s], verdict: %s\n", me.c_str(), reported,
                  list->epoch, launch::join_ranks(list->members).c_str(),
                  runtime.first_domain_verdict().c_str());
      std::fflush(stdout);
    }
    std::this_thread::sleep_for(options.step_time);
  }
  const std::shared_ptr<const elastic::MemberList> list = runtime.training_on();
  const long long members = list ? static_cast<long long>(list->members.size()) : id->world_size;
  (void)count_in_and_wait(**global, kFinishedKey, members, kEndWait);
  (void)launch::report_finished(**global, id->rank,
                                comm::incarnation(id->attempt, id->restart_count), options.steps);
  std::printf("%s: finished %lld steps, epoch %d, members [%s]\n", me.c_str(), options.steps,
              list ? list->epoch : 0, list ? launch::join_ranks(list->members).c_str() : "all");
  std::fflush(stdout);
  return 0;
}

}  // namespace ntp::cli
