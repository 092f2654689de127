// The domain hierarchy's member machine (elastic/hierarchy_member.h) in the runtime
// (elastic/hierarchy_runtime.h): real member processes, a real redis-server per domain and one
// for the leaders, and real faults: SIGKILL (then the domain's launcher posts the exit notice on
// the domain's store, as `ntp launch` does) and SIGSTOP (no notice: the hang is seen by the beat
// stopping). The simulator runs the same machine in virtual time
// (tests/elastic/control_plane_sim_test.cpp, ControlPlaneHierarchyTest); here it must keep the
// same invariants on real stores and threads:
//   - no re-formation before the fault (no healthy member taken as failed);
//   - every survivor trains again on one full list, of the global epoch the protocol's rules give
//     (a member's fault: epoch 1; a leader's: 2, for the slot that takes over gives up the epoch
//     its predecessor may have died in), that names every survivor and not the victim;
//   - every survivor re-forms exactly once for the one fault, and none is fenced or fails.
// The children write what they train on into the global store (a key each, the parent's only
// window on them); none uses GoogleTest.
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "comm/exit_notice.h"
#include "comm/store.h"
#include "core/check.h"
#include "elastic/hierarchy_runtime.h"
#include "elastic/member_list.h"
#include "multiprocess.h"
#include "redis_server.h"

namespace ntp::elastic {
namespace {

using comm::testing::RedisServer;
using std::chrono::milliseconds;

constexpr int kDomains = 3;
constexpr int kTp = 4;
constexpr int kGpus = kDomains * kTp;
constexpr const char* kRun = "hier";
constexpr const char* kGlobalGroup = "train/a0/g";

std::string domain_group(int d) { return "train/a0/d" + std::to_string(d); }
std::string result_key(int gid) { return "result/" + std::to_string(gid); }

std::shared_ptr<comm::Store> open(const RedisServer& server) {
  Result<std::shared_ptr<comm::Store>> store = comm::open_store(server.spec(), kRun);
  NTP_CHECK_MSG(store.ok(), store.status().to_string());
  return *store;
}

// The key is there (a store that did not answer: not yet).
bool has(comm::Store& store, const std::string& key) {
  Result<bool> there = store.exists(key);
  return there.ok() && *there;
}

bool wait_for(const std::function<bool()>& done, milliseconds limit) {
  const auto end = std::chrono::steady_clock::now() + limit;
  while (!done()) {
    if (std::chrono::steady_clock::now() > end) return false;
    std::this_thread::sleep_for(milliseconds(10));
  }
  return true;
}

enum class Fault { kKill, kHang };

class HierarchyRuntimeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    NTP_REQUIRE_REDIS();
    global_ = std::make_unique<RedisServer>();
    for (int d = 0; d < kDomains; ++d) domains_.push_back(std::make_unique<RedisServer>());
  }

  // One member process: beats, waits for the parent's go, runs its machine, and writes each full
  // list it trains on under its result key until the parent releases it. Exit codes: 0 released,
  // 2 a step failed, 3 it was declared dead, 4 no go or no release in time.
  int member(int gid) {
    const int domain = gid / kTp, slot = gid % kTp;
    std::shared_ptr<comm::Store> global = open(*global_);
    HierarchyRuntimeSetup setup;
    setup.member.global_group = kGlobalGroup;
    setup.member.domain_group = domain_group(domain);
    setup.member.domain = domain;
    setup.member.slot = slot;
    setup.member.domain_size = kTp;
    setup.member.domain_count = kDomains;
    setup.member.encode_layout = [] { return std::string("test layout"); };
    setup.domain_store = open(*domains_[static_cast<size_t>(domain)]);
    setup.global_store = global;
    setup.form = [](const MemberList&) { return Status(); };  // the groups: up at once
    HierarchyRuntime runtime(setup);
    NTP_CHECK(global->set("ready/" + std::to_string(gid), "1").ok());
    if (!wait_for([&] { return has(*global, "go"); }, milliseconds(30000))) {
      return 4;
    }
    runtime.start();
    int reported = 0;
    const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    while (std::chrono::steady_clock::now() < end) {
      if (runtime.left()) return 3;
      if (const std::string error = runtime.error(); !error.empty()) {
        std::fprintf(stderr, "member %d: %s\n", gid, error.c_str());
        return 2;
      }
      const std::shared_ptr<const MemberList> list = runtime.training_on();
      if (list && runtime.reformations() != reported) {
        reported = runtime.reformations();
        const std::string value = std::to_string(reported) + " " + encode(*list);
        NTP_CHECK(global->set(result_key(gid), value).ok());
      }
      if (has(*global, "release")) return 0;
      std::this_thread::sleep_for(milliseconds(20));
    }
    return 4;
  }

  // Runs the job, strikes `victim` with `fault` after a second of steady running, and checks
  // every survivor's end against `epoch`.
  void strike(int victim, Fault fault, int epoch) {
    std::shared_ptr<comm::Store> global = open(*global_);
    const std::vector<pid_t> pids =
        comm::testing::spawn_ranks(kGpus, [this](int gid) { return member(gid); });
    ASSERT_TRUE(wait_for(
        [&] {
          for (int gid = 0; gid < kGpus; ++gid) {
            if (!has(*global, "ready/" + std::to_string(gid))) return false;
          }
          return true;
        },
        milliseconds(30000)));
    ASSERT_TRUE(global->set("go", "1").ok());
    // A second of steady running: every watch looks at its neighbours' beats four times (250 ms
    // periods); no one re-forms.
    std::this_thread::sleep_for(milliseconds(1000));
    for (int gid = 0; gid < kGpus; ++gid) {
      EXPECT_FALSE(has(*global, result_key(gid))) << "member " << gid;
    }
    const pid_t victim_pid = pids[static_cast<size_t>(victim)];
    if (fault == Fault::kKill) {
      kill(victim_pid, SIGKILL);
      // The domain's launcher reaps it and posts its exit on the domain's store.
      std::shared_ptr<comm::Store> domain = open(*domains_[static_cast<size_t>(victim / kTp)]);
      ASSERT_TRUE(comm::post_exit_notice(*domain, victim % kTp, comm::incarnation(0, 0)).ok());
    } else {
      kill(victim_pid, SIGSTOP);
    }
    // Every survivor trains on a full list: a kill is seen at once, a hang within 1.5 s, and
    // each recovery's store work is a few ms here; 20 s is far past either.
    std::vector<std::string> results(kGpus);
    const bool all = wait_for(
        [&] {
          for (int gid = 0; gid < kGpus; ++gid) {
            if (gid == victim) continue;
            Result<std::string> got = global->get(result_key(gid));
            if (!got.ok()) return false;
            results[static_cast<size_t>(gid)] = *got;
          }
          return true;
        },
        milliseconds(20000));
    ASSERT_TRUE(global->set("release", "1").ok());
    if (fault == Fault::kHang) kill(victim_pid, SIGKILL);
    const std::vector<comm::testing::ChildExit> exits =
        comm::testing::wait_all(pids, milliseconds(30000));
    for (int gid = 0; gid < kGpus; ++gid) {
      if (gid == victim) continue;
      EXPECT_TRUE(exits[static_cast<size_t>(gid)].exited &&
                  exits[static_cast<size_t>(gid)].code == 0)
          << "member " << gid << " exit code " << exits[static_cast<size_t>(gid)].code;
    }
    ASSERT_TRUE(all) << "not every survivor trained again";
    std::vector<int> survivors;
    for (int gid = 0; gid < kGpus; ++gid) {
      if (gid != victim) survivors.push_back(gid);
    }
    for (int gid : survivors) {
      const std::string& result = results[static_cast<size_t>(gid)];
      const size_t space = result.find(' ');
      ASSERT_NE(space, std::string::npos);
      // One fault, one re-formation: the one its domain ran (or its leader's watch set off).
      EXPECT_EQ(result.substr(0, space), "1") << "member " << gid;
      Result<MemberList> list = decode_member_list(result.substr(space + 1));
      ASSERT_TRUE(list.ok()) << list.status().to_string();
      EXPECT_EQ(list->epoch, epoch) << "member " << gid;
      EXPECT_EQ(list->members, survivors) << "member " << gid;
    }
  }

  std::unique_ptr<RedisServer> global_;
  std::vector<std::unique_ptr<RedisServer>> domains_;
};

TEST_F(HierarchyRuntimeTest, AKilledMemberIsDroppedAndEverySurvivorTrainsOnOneFullList) {
  strike(/*victim=*/kTp + 2, Fault::kKill, /*epoch=*/1);
}

TEST_F(HierarchyRuntimeTest, AKilledLeaderIsTakenOverByTheNextSlot) {
  strike(/*victim=*/kTp, Fault::kKill, /*epoch=*/2);
}

TEST_F(HierarchyRuntimeTest, AHungMemberIsSeenByItsDomainAndDropped) {
  strike(/*victim=*/2 * kTp + 1, Fault::kHang, /*epoch=*/1);
}

TEST_F(HierarchyRuntimeTest, AHungLeaderIsTakenOverByTheNextSlot) {
  strike(/*victim=*/2 * kTp, Fault::kHang, /*epoch=*/2);
}

}  // namespace
}  // namespace ntp::elastic
