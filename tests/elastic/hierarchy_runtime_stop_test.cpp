// HierarchyRuntime's teardown (elastic/hierarchy_runtime.h) with its tasks in flight: members
// of one process (threads) against real redis-servers, destroyed in the middle of a re-formation.
// The destructor stops the machine, then waits for every worker; a worker blocked in a store
// read ends within that read's block, so the teardown is bounded by the longest block a machine
// asks for: kNoticeBlock (2 s), the await's and the watch's. Run under ASan/UBSan in CI (label
// unit): a frame or an IoSlot freed under a worker that still resumes it would show there.
#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "comm/exit_notice.h"
#include "comm/store.h"
#include "core/check.h"
#include "elastic/hierarchy_runtime.h"
#include "elastic/watch_machine.h"
#include "redis_server.h"

namespace ntp::elastic {
namespace {

using comm::testing::RedisServer;
using std::chrono::milliseconds;

std::shared_ptr<comm::Store> open(const RedisServer& server) {
  Result<std::shared_ptr<comm::Store>> store = comm::open_store(server.spec(), "stop");
  NTP_CHECK_MSG(store.ok(), store.status().to_string());
  return *store;
}

TEST(HierarchyRuntimeStopTest, MembersDestroyedInTheMiddleOfAReformationStopWithinABlock) {
  NTP_REQUIRE_REDIS();
  constexpr int kTp = 2, kDomains = 2;
  RedisServer global;
  std::vector<std::unique_ptr<RedisServer>> domains;
  for (int d = 0; d < kDomains; ++d) domains.push_back(std::make_unique<RedisServer>());
  std::vector<std::unique_ptr<HierarchyRuntime>> members;
  for (int gid = 0; gid < kTp * kDomains; ++gid) {
    HierarchyRuntimeSetup setup;
    setup.member.global_group = "train/a0/g";
    setup.member.domain_group = "train/a0/d" + std::to_string(gid / kTp);
    setup.member.domain = gid / kTp;
    setup.member.slot = gid % kTp;
    setup.member.domain_size = kTp;
    setup.member.domain_count = kDomains;
    setup.member.encode_layout = [] { return std::string("test layout"); };
    setup.domain_store = open(*domains[static_cast<size_t>(gid / kTp)]);
    setup.global_store = open(global);
    // A formation that takes a while: a member is destroyed inside it too.
    setup.form = [](const MemberList&) {
      std::this_thread::sleep_for(milliseconds(50));
      return Status();
    };
    members.push_back(std::make_unique<HierarchyRuntime>(std::move(setup)));
  }
  for (auto& m : members) m->start();
  std::this_thread::sleep_for(milliseconds(300));  // beats and first looks
  // Domain 1's launcher reports slot 1 gone (the process lives on: the re-formation drops it,
  // and it reads so): every domain re-forms.
  std::shared_ptr<comm::Store> launcher = open(*domains[1]);
  ASSERT_TRUE(comm::post_exit_notice(*launcher, 1, comm::incarnation(0, 0)).ok());
  std::this_thread::sleep_for(milliseconds(5));  // the domains' agreements and rounds under way
  const auto start = std::chrono::steady_clock::now();
  std::vector<std::thread> teardowns;  // all at once, as the processes of a job end
  for (auto& m : members) teardowns.emplace_back([&m] { m.reset(); });
  for (std::thread& t : teardowns) t.join();
  const auto took = std::chrono::steady_clock::now() - start;
  // Each teardown waits for its workers, and a worker for the op it is in: at most one block
  // (2 s) from the stop. 500 ms over it for the store's round trips on a loaded host.
  EXPECT_LT(took, kNoticeBlock + milliseconds(500));
}

}  // namespace
}  // namespace ntp::elastic
