// The domain hierarchy end to end under `ntp launch`: 12 `ntp hierarchy-worker` processes in 3
// domains of 4 (--domain-size 4), the leaders on the job's redis store and each domain on its own
// namespace of a second redis-server (--domain-store), and the launcher's own fault: a SIGKILL at
// a step, after which the launcher posts the exit notice on the job's store and on the victim's
// domain's store (launch/launcher.h). The watches' hang bounds are 30 s, longer than the run, so a
// recovery within the run is one the launcher's notice started, not a beat going stale.
// The same invariants as HierarchyRuntimeTest (forked members, notices posted by the test):
// every survivor trains again exactly once, on one full list of the survivors, of the global
// epoch the rules give (1 for a member, 2 for a leader: the takeover gives up one epoch), and
// finishes; the launcher exits 0 and names its one lost worker.
#include <gtest/gtest.h>

#include <chrono>
#include <regex>
#include <string>
#include <vector>

#include "../comm/redis_server.h"
#include "child_process.h"
#include "text_files.h"

namespace {

using ntp::comm::testing::RedisServer;
using ntp::testing::count;

constexpr int kWorkers = 12;
constexpr int kTp = 4;

struct Run {
  ntp::testing::CommandOutput launch;
  std::string members;  // the survivors, as the workers print them
};

// Kills `victim` at step 30 of 150 (20 ms each: ~2.4 s of the run left to recover in).
Run run_with_kill(int victim) {
  RedisServer job, domains;
  EXPECT_TRUE(job.ready() && domains.ready());
  const std::vector<std::string> argv = {NTP_BINARY,
                                         "launch",
                                         "--nproc-per-node",
                                         std::to_string(kWorkers),
                                         "--store",
                                         job.spec(),
                                         "--run-id",
                                         "hier",
                                         "--domain-size",
                                         std::to_string(kTp),
                                         "--domain-store",
                                         domains.spec(),
                                         "--inject",
                                         "kill:rank=" + std::to_string(victim) + ",at=30",
                                         "--",
                                         "ntp",
                                         "hierarchy-worker",
                                         "--steps",
                                         "150",
                                         "--step-ms",
                                         "20",
                                         "--hang-ms",
                                         "30000",
                                         "--global-hang-ms",
                                         "30000"};
  Run run;
  run.launch =
      ntp::testing::finish_child(ntp::testing::start_child(argv), std::chrono::seconds(90));
  for (int id = 0; id < kWorkers; ++id) {
    if (id != victim) run.members += (run.members.empty() ? "" : ",") + std::to_string(id);
  }
  return run;
}

// What every survivor printed: one re-formation onto the survivors' list of `epoch`, and its end
// on it; and the verdicts of the victim's domain, which heard of the kill first.
void expect_recovered(const Run& run, int victim, int epoch) {
  const std::string& out = run.launch.out;
  ASSERT_FALSE(run.launch.timed_out) << out << run.launch.err;
  EXPECT_EQ(run.launch.exit_code, 0) << out << run.launch.err;
  EXPECT_EQ(count(run.launch.err, "rank " + std::to_string(victim) +
                                      " (restart 0, attempt 0): injected kill (at step 30)"),
            1)
      << run.launch.err;
  const std::string list = "epoch " + std::to_string(epoch) + ", members [" + run.members + "]";
  EXPECT_EQ(count(out, "reformed 2"), 0) << out;
  for (int id = 0; id < kWorkers; ++id) {
    if (id == victim) continue;
    const std::string me = "[rank " + std::to_string(id) + "] rank " + std::to_string(id) + ": ";
    EXPECT_EQ(count(out, me + "reformed 1: " + list + ", verdict: "), 1) << id << "\n" << out;
    EXPECT_EQ(count(out, me + "finished 150 steps, " + list + "\n"), 1) << id << "\n" << out;
    if (id / kTp != victim / kTp) continue;
    // Its domain's watch fired on the launcher's notice (slot victim % kTp of the domain), or on
    // the failure a domain member posted having read it; a beat cannot have gone stale.
    const std::regex verdict(std::regex_replace(me, std::regex(R"([\[\]])"), R"(\$&)") +
                             "reformed 1: [^\n]*verdict: (the launcher reported rank " +
                             std::to_string(victim % kTp) +
                             " gone|a member's step failed \\(epoch 0\\))\n");
    EXPECT_TRUE(std::regex_search(out, verdict)) << id << "\n" << out;
  }
  EXPECT_EQ(count(out, "made no progress"), 0) << out;
}

TEST(HierarchyLaunchTest, AMemberKilledByTheLauncherIsNoticedOnItsDomainsStore) {
  NTP_REQUIRE_REDIS();
  const int victim = kTp + 1;  // slot 1 of domain 1
  expect_recovered(run_with_kill(victim), victim, 1);
}

TEST(HierarchyLaunchTest, ALeaderKilledByTheLauncherIsTakenOverByTheNextSlot) {
  NTP_REQUIRE_REDIS();
  const int victim = kTp;  // slot 0 of domain 1: its leader
  expect_recovered(run_with_kill(victim), victim, 2);
}

}  // namespace
