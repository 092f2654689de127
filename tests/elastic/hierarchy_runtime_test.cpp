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
//   - every survivor re-forms exactly once for the one fault, and none is fenced or fails;
//   - the list's step is its holders' least committed step (members announce 40 or 41), as the
//     trainer's plan_reform needs it.
// The children write what they train on into the global store (a key each, the parent's only
// window on them); none uses GoogleTest. Beside single faults: a second kill at moments that
// cross the takeover, and a leader stopped and continued, shorter and longer than the hang bound.
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "comm/communicator.h"
#include "comm/exit_notice.h"
#include "comm/gloo_communicator.h"
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

// A signal sent to a member, `after` the strike before it (the first: after the steady second).
// SIGKILL is followed by the domain launcher's exit notice, as `ntp launch` posts it.
struct Strike {
  int gid;
  int signal;
  milliseconds after;
};

// What a run must end with.
struct Expect {
  std::set<int> gone;        // not in the survivors' list (killed, hung, or declared dead)
  std::map<int, int> left;   // of those, members that exit by themselves, and their exit code
  std::optional<int> epoch;  // the survivors' global epoch, where the rules fix it
  std::optional<int> reformations;  // each survivor's, where one fault fixes it
};

// The step member `gid`'s state is at (announced in its domain's agreement): 40, or 41 for every
// third GPU, whose update went through before the fault (GPUs differ by at most one step).
std::int64_t committed_of(int gid) { return gid % 3 == 1 ? 41 : 40; }

std::string mesh_prefix(const MemberList& full) {
  return "train/a0/e" + std::to_string(full.epoch);
}

// The trainer's groups on `full` (train/job.cpp's shape) over its domain's store: the world, its
// TP group (its domain), its DP group (its slot in every listed domain), each with a barrier; then
// an all-reduce of the members' ids over the world, which crosses every domain. Its peers in other
// domains' addresses reach it only through the leaders' relay (elastic/address_relay.h).
Status form_groups(const std::shared_ptr<comm::Store>& store, const MemberList& full, int gid,
                   int mesh_max, std::vector<std::unique_ptr<comm::Communicator>>& groups) {
  groups.clear();
  const auto ranks_where = [&full](auto pick) {
    std::vector<int> out;
    for (size_t r = 0; r < full.members.size(); ++r) {
      if (pick(full.members[r])) out.push_back(static_cast<int>(r));
    }
    return out;
  };
  const std::vector<int> tp = ranks_where([gid](int id) { return id / kTp == gid / kTp; });
  const std::vector<int> dp = ranks_where([gid](int id) { return id % kTp == gid % kTp; });
  comm::GlooOptions gloo;
  gloo.store = store;
  gloo.rank = static_cast<int>(std::find(full.members.begin(), full.members.end(), gid) -
                               full.members.begin());
  gloo.size = static_cast<int>(full.members.size());
  gloo.prefix = mesh_prefix(full);
  gloo.timeout = milliseconds(20000);
  gloo.full_mesh_max_size = mesh_max;
  gloo.planned_subgroups = {tp, dp};
  NTP_ASSIGN_OR_RETURN(std::unique_ptr<comm::Communicator> world, comm::connect_gloo(gloo));
  NTP_ASSIGN_OR_RETURN(std::unique_ptr<comm::Communicator> tp_group, world->subgroup(tp, "tp"));
  NTP_ASSIGN_OR_RETURN(std::unique_ptr<comm::Communicator> dp_group, world->subgroup(dp, "dp"));
  for (comm::Communicator* group : {world.get(), tp_group.get(), dp_group.get()}) {
    NTP_RETURN_IF_ERROR(group->barrier());
  }
  std::vector<double> sum{static_cast<double>(gid)};
  NTP_RETURN_IF_ERROR(world->allreduce(comm::view(sum)));
  double expected = 0;
  for (int id : full.members) expected += id;
  if (sum[0] != expected) {
    return internal_error("the world's all-reduce of the ids gave " + std::to_string(sum[0]) +
                          ", not " + std::to_string(expected));
  }
  groups.push_back(std::move(world));
  groups.push_back(std::move(tp_group));
  groups.push_back(std::move(dp_group));
  return Status();
}

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
    setup.member.announce = [gid] { return Announcement{committed_of(gid), 0}; };
    setup.domain_store = open(*domains_[static_cast<size_t>(domain)]);
    setup.global_store = global;
    std::vector<std::unique_ptr<comm::Communicator>> groups;
    if (mesh_max_ > 0) {  // real groups, over the domain's store
      setup.form = [&groups, store = setup.domain_store, gid,
                    max = mesh_max_](const MemberList& full) {
        return form_groups(store, full, gid, max, groups);
      };
      setup.member.mesh_prefix = mesh_prefix;
      setup.member.shape = {kTp, mesh_max_};
      setup.member.relay_timeout = milliseconds(20000);
    } else if (gid == fail_first_formation_of_) {  // its first formation meets a peer gone
      setup.form = [failed = false](const MemberList&) mutable {
        if (failed) return Status();
        failed = true;
        return unavailable("injected: a peer refused the link");
      };
    } else {
      setup.form = [](const MemberList&) { return Status(); };  // the groups: up at once
    }
    HierarchyRuntime runtime(setup);
    NTP_CHECK(global->set("ready/" + std::to_string(gid), "1").ok());
    const auto formation_failures = [&runtime, gid, global] {
      const int failures = runtime.formation_failures();
      if (failures > 0) {
        NTP_CHECK(global->set("form_failed/" + std::to_string(gid), std::to_string(failures)).ok());
      }
    };
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
      if (has(*global, "release")) {
        formation_failures();
        return 0;
      }
      std::this_thread::sleep_for(milliseconds(20));
    }
    return 4;
  }

  // Runs the job, then, after a second of steady running, `strikes` one after another, and
  // checks every member's end against `expect`.
  void run_job(const std::vector<Strike>& strikes, const Expect& expect) {
    // Empty stores for every job (a test may run several): a restart, without persistence.
    for (RedisServer* server : servers()) {
      server->kill_now();
      ASSERT_TRUE(server->start());
    }
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
    std::set<pid_t> stopped;
    for (const Strike& strike : strikes) {
      std::this_thread::sleep_for(strike.after);
      const pid_t pid = pids[static_cast<size_t>(strike.gid)];
      kill(pid, strike.signal);
      if (strike.signal == SIGSTOP) stopped.insert(pid);
      if (strike.signal == SIGCONT) stopped.erase(pid);
      if (strike.signal != SIGKILL) continue;
      // The domain's launcher reaps it and posts its exit on the domain's store.
      std::shared_ptr<comm::Store> domain = open(*domains_[static_cast<size_t>(strike.gid / kTp)]);
      ASSERT_TRUE(comm::post_exit_notice(*domain, strike.gid % kTp, comm::incarnation(0, 0)).ok());
    }
    std::vector<int> survivors;
    for (int gid = 0; gid < kGpus; ++gid) {
      if (expect.gone.count(gid) == 0) survivors.push_back(gid);
    }
    // Every survivor trains on a full list of the survivors: a kill is seen at once, a hang
    // within 1.5 s, a leader's within 4.5 s, and each recovery's store work is a few ms here;
    // 20 s is far past any of them.
    std::map<int, std::pair<int, MemberList>> ends;  // gid -> its re-formations, its list
    const bool all =
        wait_for([&] { return read_ends(*global, survivors, ends); }, milliseconds(20000));
    ASSERT_TRUE(global->set("release", "1").ok());
    for (pid_t pid : stopped) kill(pid, SIGKILL);  // the hung ones
    const std::vector<comm::testing::ChildExit> exits =
        comm::testing::wait_all(pids, milliseconds(30000));
    for (int gid = 0; gid < kGpus; ++gid) {
      const comm::testing::ChildExit& exit = exits[static_cast<size_t>(gid)];
      const auto left = expect.left.find(gid);
      if (left != expect.left.end() || expect.gone.count(gid) == 0) {
        const int code = left != expect.left.end() ? left->second : 0;
        EXPECT_TRUE(exit.exited && exit.code == code)
            << "member " << gid << " exit code " << exit.code << ", signal " << exit.signal;
      }
    }
    ASSERT_TRUE(all) << "not every survivor trained again on a list of the survivors";
    for (int gid : survivors) {
      const auto& [reformations, list] = ends.at(gid);
      if (expect.reformations) {
        EXPECT_EQ(reformations, *expect.reformations) << "member " << gid;
      }
      if (expect.epoch) {
        EXPECT_EQ(list.epoch, *expect.epoch) << "member " << gid;
      }
      EXPECT_EQ(list.epoch, ends.at(survivors.front()).second.epoch) << "member " << gid;
      // The trainer's step: the least committed step of the list's holders (every survivor
      // holds state here: the base is epoch 0, whose list was every GPU).
      EXPECT_EQ(list.holders, survivors) << "member " << gid;
      EXPECT_EQ(list.step, 40) << "member " << gid;
    }
  }

  // Reads every survivor's result into `ends`; true once each trains on a list of exactly the
  // survivors.
  static bool read_ends(comm::Store& global, const std::vector<int>& survivors,
                        std::map<int, std::pair<int, MemberList>>& ends) {
    for (int gid : survivors) {
      Result<std::string> got = global.get(result_key(gid));
      if (!got.ok()) return false;
      const size_t space = got->find(' ');
      Result<MemberList> list = decode_member_list(got->substr(space + 1));
      NTP_CHECK_MSG(space != std::string::npos && list.ok(),
                    "member " + std::to_string(gid) + "'s result: " + *got);
      if (list->members != survivors) return false;
      ends[gid] = {std::stoi(got->substr(0, space)), *list};
    }
    return true;
  }

  // A member's fault and a member's single fault and its expected end.
  void strike(int victim, int signal, int epoch) {
    run_job({{victim, signal, milliseconds(0)}}, {{victim}, {}, epoch, 1});
  }

  std::vector<RedisServer*> servers() {
    std::vector<RedisServer*> all{global_.get()};
    for (auto& d : domains_) all.push_back(d.get());
    return all;
  }

  std::unique_ptr<RedisServer> global_;
  std::vector<std::unique_ptr<RedisServer>> domains_;
  // > 0: members form real Gloo groups with this full-mesh bound (comm::GlooOptions); 0: none.
  int mesh_max_ = 0;
  // A member whose first formation fails with kUnavailable (-1: none).
  int fail_first_formation_of_ = -1;
};

TEST_F(HierarchyRuntimeTest, AKilledMemberIsDroppedAndEverySurvivorTrainsOnOneFullList) {
  strike(/*victim=*/kTp + 2, SIGKILL, /*epoch=*/1);
}

TEST_F(HierarchyRuntimeTest, AKilledLeaderIsTakenOverByTheNextSlot) {
  strike(/*victim=*/kTp, SIGKILL, /*epoch=*/2);
}

TEST_F(HierarchyRuntimeTest, AHungMemberIsSeenByItsDomainAndDropped) {
  strike(/*victim=*/2 * kTp + 1, SIGSTOP, /*epoch=*/1);
}

TEST_F(HierarchyRuntimeTest, AHungLeaderIsTakenOverByTheNextSlot) {
  strike(/*victim=*/2 * kTp, SIGSTOP, /*epoch=*/2);
}

TEST_F(HierarchyRuntimeTest, SurvivorsFormRealGroupsAcrossDomainsOverTheirDomainStoresOnly) {
  // Every survivor forms its world, TP and DP groups with Gloo over its own domain's store, and
  // all-reduces the members' ids over the world: the addresses of its 8 peers in the other two
  // domains reach it through the leaders' relay. A full mesh (11 members, under 32).
  mesh_max_ = 32;
  strike(/*victim=*/kTp + 2, SIGKILL, /*epoch=*/1);
}

// A formation that meets a peer gone before any watch saw it (the trainer's Gloo connect timing
// out, a link refused) fails its domain's epoch, as the flat trainer's re-formation reports such a
// failure: the domain re-forms, its leader enters a new global round, and every survivor trains on
// one full list of global epoch 2, the member whose formation failed included, once re-formed.
// (Before, the runtime kept the formation's error and the member stopped: exit 2.)
TEST_F(HierarchyRuntimeTest, AFormationThatMeetsAPeerGoneReformsTheDomain) {
  fail_first_formation_of_ = 2 * kTp + 1;  // domain 2, not the victim's
  run_job({{kTp + 2, SIGKILL, milliseconds(0)}}, {{kTp + 2}, {}, 2, std::nullopt});
  std::shared_ptr<comm::Store> global = open(*global_);
  for (int gid = 0; gid < kGpus; ++gid) {
    const bool failed = gid == fail_first_formation_of_;
    Result<std::string> failures = global->get("form_failed/" + std::to_string(gid));
    EXPECT_EQ(failures.ok() ? *failures : "0", failed ? "1" : "0") << "member " << gid;
  }
}

TEST_F(HierarchyRuntimeTest, SurvivorsFormSparseGroupsAcrossDomainsAfterALeadersDeath) {
  // The same with a full-mesh bound of 4: the world of 11 connects its ring and tree links only
  // (comm/gloo_tree.h), which the relay must name exactly, and the leader of domain 1 is the
  // one killed, so its successor relays.
  mesh_max_ = 4;
  strike(/*victim=*/kTp, SIGKILL, /*epoch=*/2);
}

TEST_F(HierarchyRuntimeTest, TheSlotTakingOverKilledAtAnyMomentIsReplacedByTheNext) {
  // Domain 1's leader killed, then the slot that takes its lead over, 0-20 ms later: before it
  // heard, in its domain's agreement, in its takeover, or after its relay (a recovery here takes
  // a few ms). The rules fix no epoch (each takeover gives one up, a second re-formation of the
  // domain may come before or after the first global round); every survivor still ends on one
  // full list without either.
  for (int after_ms : {0, 2, 5, 20}) {
    SCOPED_TRACE("second kill after " + std::to_string(after_ms) + " ms");
    run_job({{kTp, SIGKILL, milliseconds(0)}, {kTp + 1, SIGKILL, milliseconds(after_ms)}},
            {{kTp, kTp + 1}, {}, {}, {}});
    if (HasFatalFailure()) return;
  }
}

TEST_F(HierarchyRuntimeTest, ALeaderStoppedShorterThanTheHangBoundStaysAMember) {
  // A member of domain 1 killed, and domain 2's leader stopped 1 ms later for 400 ms (SIGSTOP,
  // SIGCONT): well under the 1 s its domain's watch allows a still beat, so no one takes it as
  // hung. The recovery waits for it, and it carries out what it was doing when it wakes.
  run_job({{kTp + 2, SIGKILL, milliseconds(0)},
           {2 * kTp, SIGSTOP, milliseconds(1)},
           {2 * kTp, SIGCONT, milliseconds(400)}},
          {{kTp + 2}, {}, 1, 1});
}

TEST_F(HierarchyRuntimeTest, ALeaderStoppedPastTheHangBoundIsDroppedAndLeavesWhenItWakes) {
  // As above, stopped for 3 s: its domain takes it as hung (within 1.5 s) and takes its lead
  // over, the job agrees without it, and when it wakes it reads that it was declared dead and
  // leaves (exit code 3), whatever it was about to do.
  run_job({{kTp + 2, SIGKILL, milliseconds(0)},
           {2 * kTp, SIGSTOP, milliseconds(1)},
           {2 * kTp, SIGCONT, milliseconds(3000)}},
          {{kTp + 2, 2 * kTp}, {{2 * kTp, 3}}, {}, {}});
}

}  // namespace
}  // namespace ntp::elastic
