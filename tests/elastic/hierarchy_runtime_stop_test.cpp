// HierarchyRuntime (elastic/hierarchy_runtime.h) with its members as threads of one process
// against real redis-servers, so that ASan/UBSan see every frame, slot and relay it hands between
// threads (run under them in CI: label unit; the multi-process cases are
// hierarchy_runtime_test.cpp's):
//   - a teardown in the middle of a re-formation. The destructor stops the machine, then waits
//     for every worker; a worker blocked in a store read ends within that read's block, so the
//     teardown is bounded by the longest block a machine asks for: kNoticeBlock (2 s);
//   - a re-formation whose members form real Gloo groups over their domain stores, the addresses
//     across domains carried by the leaders' relay, which leaves no address key behind.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "comm/communicator.h"
#include "comm/exit_notice.h"
#include "comm/gloo_communicator.h"
#include "comm/pair_mesh.h"
#include "comm/store.h"
#include "core/check.h"
#include "elastic/address_relay.h"
#include "elastic/hierarchy_runtime.h"
#include "elastic/watch_machine.h"
#include "redis_server.h"

namespace ntp::elastic {
namespace {

using comm::testing::RedisServer;
using std::chrono::milliseconds;

constexpr int kTp = 2, kDomains = 2;

std::shared_ptr<comm::Store> open(const RedisServer& server) {
  Result<std::shared_ptr<comm::Store>> store = comm::open_store(server.spec(), "stop");
  NTP_CHECK_MSG(store.ok(), store.status().to_string());
  return *store;
}

// The world over `full` on `store`, and an all-reduce of the members' ids over it (it crosses
// both domains).
Status form_world(const std::shared_ptr<comm::Store>& store, const MemberList& full, int gid,
                  std::unique_ptr<comm::Communicator>& world) {
  comm::GlooOptions gloo;
  gloo.store = store;
  gloo.rank = static_cast<int>(std::find(full.members.begin(), full.members.end(), gid) -
                               full.members.begin());
  gloo.size = static_cast<int>(full.members.size());
  gloo.prefix = "train/a0/e" + std::to_string(full.epoch);
  gloo.timeout = milliseconds(20000);
  NTP_ASSIGN_OR_RETURN(world, comm::connect_gloo(gloo));
  std::vector<double> sum{static_cast<double>(gid)};
  NTP_RETURN_IF_ERROR(world->allreduce(comm::view(sum)));
  double expected = 0;
  for (int id : full.members) expected += id;
  if (sum[0] != expected) return internal_error("the ids summed to " + std::to_string(sum[0]));
  return Status();
}

class HierarchyRuntimeInProcessTest : public ::testing::Test {
 protected:
  void SetUp() override {
    NTP_REQUIRE_REDIS();
    global_ = std::make_unique<RedisServer>();
    for (int d = 0; d < kDomains; ++d) domains_.push_back(std::make_unique<RedisServer>());
  }

  // Members 0..3 in two domains of two, started; with `gloo`, each forms its world over its
  // domain's store (the relay carries the other domain's addresses), else its formation takes
  // 50 ms of nothing (a member is destroyed inside it too).
  void start(bool gloo) {
    worlds_.resize(kTp * kDomains);
    for (int gid = 0; gid < kTp * kDomains; ++gid) {
      HierarchyRuntimeSetup setup;
      setup.member.global_group = "train/a0/g";
      setup.member.domain_group = "train/a0/d" + std::to_string(gid / kTp);
      setup.member.domain = gid / kTp;
      setup.member.slot = gid % kTp;
      setup.member.domain_size = kTp;
      setup.member.domain_count = kDomains;
      setup.member.encode_layout = [] { return std::string("test layout"); };
      setup.domain_store = open(*domains_[static_cast<size_t>(gid / kTp)]);
      setup.global_store = open(*global_);
      if (gloo) {
        setup.form = [this, store = setup.domain_store, gid](const MemberList& full) {
          return form_world(store, full, gid, worlds_[static_cast<size_t>(gid)]);
        };
        setup.member.mesh_prefix = [](const MemberList& full) {
          return "train/a0/e" + std::to_string(full.epoch);
        };
        setup.member.shape = {kTp, comm::GlooOptions{}.full_mesh_max_size};
      } else {
        setup.form = [](const MemberList&) {
          std::this_thread::sleep_for(milliseconds(50));
          return Status();
        };
      }
      members_.push_back(std::make_unique<HierarchyRuntime>(std::move(setup)));
    }
    for (auto& m : members_) m->start();
    std::this_thread::sleep_for(milliseconds(300));  // beats and first looks
  }

  // Domain 1's launcher reports slot 1 gone (the process lives on: the re-formation drops it, and
  // it reads so): every domain re-forms.
  void report_gone() {
    std::shared_ptr<comm::Store> launcher = open(*domains_[1]);
    ASSERT_TRUE(comm::post_exit_notice(*launcher, 1, comm::incarnation(0, 0)).ok());
  }

  // Destroys every member at once, as the processes of a job end; how long it took.
  std::chrono::steady_clock::duration tear_down() {
    const auto start = std::chrono::steady_clock::now();
    std::vector<std::thread> teardowns;
    for (auto& m : members_) teardowns.emplace_back([&m] { m.reset(); });  // (null: no-op)
    for (std::thread& t : teardowns) t.join();
    worlds_.clear();
    return std::chrono::steady_clock::now() - start;
  }

  std::unique_ptr<RedisServer> global_;
  std::vector<std::unique_ptr<RedisServer>> domains_;
  std::vector<std::unique_ptr<HierarchyRuntime>> members_;
  std::vector<std::unique_ptr<comm::Communicator>> worlds_;  // [gid], with gloo
};

TEST_F(HierarchyRuntimeInProcessTest, MembersDestroyedInTheMiddleOfAReformationStopWithinABlock) {
  start(/*gloo=*/false);
  report_gone();
  std::this_thread::sleep_for(milliseconds(5));  // the domains' agreements and rounds under way
  // Each teardown waits for its workers, and a worker for the op it is in: at most one block
  // (2 s) from the stop. 500 ms over it for the store's round trips on a loaded host.
  EXPECT_LT(tear_down(), kNoticeBlock + milliseconds(500));
}

TEST_F(HierarchyRuntimeInProcessTest, SurvivorsFormAWorldAcrossDomainsThroughTheRelay) {
  start(/*gloo=*/true);
  members_[3].reset();  // killed: its threads and connections gone
  report_gone();
  // Members 0, 1 and 2 train on the full list of epoch 1 once their world is up and its
  // all-reduce summed 0 + 1 + 2. 20 s is the formation's own timeout: far past a formation of
  // three (a few ms here).
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  auto done = [this] {
    for (int gid = 0; gid < 3; ++gid) {
      const std::shared_ptr<const MemberList> list =
          members_[static_cast<size_t>(gid)]->training_on();
      if (!list || list->members != std::vector<int>{0, 1, 2}) return false;
    }
    return true;
  };
  while (!done() && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(milliseconds(10));
  }
  for (int gid = 0; gid < 3; ++gid) {
    EXPECT_EQ(members_[static_cast<size_t>(gid)]->error(), "") << "member " << gid;
  }
  ASSERT_TRUE(done()) << "not every survivor trained on a world across the domains";
  for (int gid = 0; gid < 3; ++gid) {
    EXPECT_EQ(members_[static_cast<size_t>(gid)]->training_on()->epoch, 1) << "member " << gid;
    EXPECT_EQ(members_[static_cast<size_t>(gid)]->reformations(), 1) << "member " << gid;
  }
  // Every address key had one reader, which erased it: the members theirs, the leaders the
  // members' keys they collected and the batches they traded (beside their next step, so 2 s
  // for those last ops to land: each is one op, sent before its members' formation ended).
  std::vector<std::string> domain_keys, global_keys;
  for (int from = 0; from < 3; ++from) {
    for (int to = 0; to < 3; ++to) {
      if (from != to) domain_keys.push_back(comm::pair_address_key("train/a0/e1", from, to));
    }
  }
  for (int from = 0; from < kDomains; ++from) {
    global_keys.push_back(relay_batch_key("train/a0/g", 1, from, 1 - from));
  }
  auto left = [&] {
    std::vector<std::string> out;
    const auto look = [&out](comm::Store& store, const std::vector<std::string>& keys) {
      Result<std::vector<std::optional<std::string>>> values = store.get_many(keys);
      NTP_CHECK_MSG(values.ok(), values.status().to_string());
      for (size_t k = 0; k < keys.size(); ++k) {
        if ((*values)[k]) out.push_back(store.describe() + " " + keys[k]);
      }
    };
    for (const auto& domain : domains_) look(*open(*domain), domain_keys);
    look(*open(*global_), global_keys);
    return out;
  };
  const auto erase_deadline = std::chrono::steady_clock::now() + std::chrono::seconds(2);
  while (!left().empty() && std::chrono::steady_clock::now() < erase_deadline) {
    std::this_thread::sleep_for(milliseconds(10));
  }
  EXPECT_EQ(left(), std::vector<std::string>{});
  tear_down();
}

}  // namespace
}  // namespace ntp::elastic
