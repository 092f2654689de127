// End-to-end tests of `ntp launch`: the real binary, real worker processes, real signals.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <regex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "../comm/redis_server.h"
#include "child_process.h"
#include "comm/exit_notice.h"
#include "comm/store.h"
#include "comm/stream.h"
#include "dependency.h"
#include "launch/identity.h"
#include "text_files.h"

namespace {

using LaunchRun = ntp::testing::CommandOutput;
using ntp::testing::count;
using ntp::testing::read_file;
using ntp::testing::TempDir;

// Starts `ntp` with `args` (extra environment in `env`).
ntp::testing::ChildProcess start(const std::vector<std::string>& args,
                                 const std::vector<std::string>& env = {}) {
  std::vector<std::string> argv{NTP_BINARY};
  argv.insert(argv.end(), args.begin(), args.end());
  return ntp::testing::start_child(argv, env);
}

// Collects the output and reaps. Fails the test (and kills) on a hang.
LaunchRun finish(const ntp::testing::ChildProcess& child, std::chrono::seconds limit) {
  LaunchRun run = ntp::testing::finish_child(child, limit);
  if (run.timed_out) ADD_FAILURE() << "ntp launch did not finish within " << limit.count() << " s";
  return run;
}

LaunchRun ntp(const std::vector<std::string>& args, const std::vector<std::string>& env = {},
              std::chrono::seconds limit = std::chrono::seconds(60)) {
  return finish(start(args, env), limit);
}

// The launcher reaps its workers and their orphaned children itself (it is their subreaper), so
// once it returned none of them may exist, not even as a zombie.
bool process_gone(pid_t pid) { return kill(pid, 0) != 0 && errno == ESRCH; }

const std::string kWorker = "comm-worker";

TEST(LaunchTest, GivesEachWorkerItsIdentityAndPrefixesItsLines) {
  TempDir dir;
  LaunchRun run = ntp({"launch", "--nproc-per-node", "3", "--nnodes", "2", "--node-rank", "1",
                       "--store", "file:" + dir.path(), "--run-id", "ident", "--log-dir",
                       dir.path() + "/logs", "--", "sh", "-c",
                       "echo id $NTP_RANK $NTP_WORLD_SIZE $NTP_LOCAL_RANK $NTP_LOCAL_WORLD_SIZE "
                       "$NTP_NODE_RANK $NTP_NNODES $NTP_RUN_ID $NTP_RESTART_COUNT $NTP_STORE; "
                       "echo oops >&2"});
  EXPECT_EQ(run.exit_code, 0) << run.err;
  for (int local = 0; local < 3; ++local) {
    const int rank = 3 + local;
    const std::string want = "[rank " + std::to_string(rank) + "] id " + std::to_string(rank) +
                             " 6 " + std::to_string(local) + " 3 1 2 ident 0 file:" + dir.path();
    EXPECT_NE(run.out.find(want + "\n"), std::string::npos) << run.out;
    EXPECT_NE(run.err.find("[rank " + std::to_string(rank) + "] oops\n"), std::string::npos)
        << run.err;
    const std::string log = read_file(dir.path() + "/logs/rank_" + std::to_string(rank) + ".log");
    EXPECT_NE(log.find("id " + std::to_string(rank) + " 6"), std::string::npos) << log;
    EXPECT_NE(log.find("oops"), std::string::npos) << log;
  }
}

TEST(LaunchTest, TakesTheNodeFromSlurmAndOpenMpiVariables) {
  TempDir dir;
  const std::vector<std::string> args = {"launch",
                                         "--nproc-per-node",
                                         "2",
                                         "--store",
                                         "file:" + dir.path(),
                                         "--",
                                         "sh",
                                         "-c",
                                         "echo at $NTP_RANK of $NTP_WORLD_SIZE"};
  LaunchRun slurm = ntp(args, {"SLURM_NODEID=2", "SLURM_NNODES=3"});
  EXPECT_EQ(slurm.exit_code, 0) << slurm.err;
  EXPECT_EQ(count(slurm.out, "at 4 of 6\n") + count(slurm.out, "at 5 of 6\n"), 2) << slurm.out;
  LaunchRun ompi = ntp(args, {"OMPI_COMM_WORLD_RANK=1", "OMPI_COMM_WORLD_SIZE=2"});
  EXPECT_EQ(ompi.exit_code, 0) << ompi.err;
  EXPECT_EQ(count(ompi.out, "at 2 of 4\n") + count(ompi.out, "at 3 of 4\n"), 2) << ompi.out;
}

TEST(LaunchTest, PropagatesTheExitCodeOfTheLowestFailingRank) {
  TempDir dir;
  LaunchRun fail = ntp({"launch", "--nproc-per-node", "3", "--store", "file:" + dir.path(), "--",
                        "sh", "-c", "[ $NTP_RANK -eq 0 ] && exit 0; exit $((NTP_RANK + 40))"});
  EXPECT_EQ(fail.exit_code, 41) << fail.err;
  EXPECT_NE(fail.err.find("rank 2 exited with code 42"), std::string::npos) << fail.err;
  LaunchRun missing = ntp({"launch", "--nproc-per-node", "1", "--store", "file:" + dir.path(), "--",
                           "/nonexistent/program"});
  EXPECT_EQ(missing.exit_code, 127);
}

TEST(LaunchTest, BadInputIsOneLineAndExitCodeTwo) {
  TempDir dir;
  struct Case {
    std::vector<std::string> args;
    std::string named;  // the bad value the message must name
  };
  const std::string store = "file:" + dir.path();
  const std::vector<Case> cases = {
      {{"--store", store, "--inject", "kill:rank=9,at=3"}, "rank=9"},
      {{"--store", store, "--inject", "kill:rank=1"}, "kill:rank=1"},
      {{"--store", store, "--chaos", "1"}, "--chaos '1'"},
      {{"--store", "bogus:x"}, "bogus:x"},
      {{"--store", store, "--run-id", "has space"}, "has space"},
      {{"--store", store, "--nnodes", "2", "--node-rank", "2"}, "--node-rank 2"},
      {{"--nnodes", "2", "--node-rank", "1"}, "needs a store every node reaches"},
      {{"--store", store, "--max-restarts", "2"}, "--max-restarts 2 needs --restart-on-failure"},
      {{"--store", store, "--restart-on-failure", "--max-restarts", "-1"},
       "--max-restarts -1 must be at least 0"},
      {{"--store", store, "--restart-on-failure", "--inject", "repair:rank=1,at=2"},
       "cannot be combined with --restart-on-failure"},
      {{"--store", store, "--restart-on-failure", "--replace-failed", "2"},
       "--replace-failed cannot be combined with --restart-on-failure"},
      {{"--store", store, "--replace-failed", "-1"}, "--replace-failed -1"},
      {{"--store", store, "--ranks", "0"}, "--ranks 0 names 1 ranks for 2 workers"},
      {{"--store", store, "--ranks", "1,1"}, "--ranks 1,1 names a rank twice"},
      {{"--store", store, "--ranks", "0,2"}, "--ranks 0,2 must lie in [0, 2)"},
      {{"--store", store, "--ranks", "0,x"}, "'x', not a rank"},
      {{"--store", store, "--local-addr", "192.0.2.77"}, "--local-addr 192.0.2.77 is not an"},
      {{"--store", store, "--inject", "slow:rank=9,factor=0.5,at=3"}, "slow:rank=9 is outside"},
      {{"--store", store, "--inject", "stall:rank=2,at=3"}, "stall:rank=2 is outside"},
      {{"--store", store, "--inject", "slow:rank=1,factor=2,at=3"}, "factor='2' is not in (0, 1]"},
      {{"--store", store, "--inject", "slow:rank=1,factor=0,at=3"}, "factor='0' is not in (0, 1]"},
      {{"--store", store, "--inject", "slow:rank=1,at=3"}, "needs factor=F"},
      {{"--store", store, "--inject", "slow:rank=1,factor=0.5,at=6,until=6"},
       "until=6 must be after at=6"},
      {{"--store", store, "--inject", "slow:rank=1,factor=0.5,at=3,by=2"}, "unknown field 'by'"},
      {{"--store", store, "--inject", "stall:rank=1,at=2.5s"}, "use at=STEP"},
      {{"--store", store, "--domain-size", "3"}, "--domain-size 3 must be at least 1 and divide"},
      {{"--store", store, "--domain-size", "-2"}, "--domain-size -2"},
      {{"--store", store, "--domain-store", store}, "needs --domain-size"},
      {{"--store", store, "--domain-size", "1", "--domain-store", "bogus:{domain}"}, "bogus:0"},
      {{"--store", "redis://:a@127.0.0.1:1", "--domain-size", "1", "--domain-store",
        "redis://:b@127.0.0.1:1"},
       "a password other than --store's"},
  };
  for (const Case& c : cases) {
    std::vector<std::string> args = {"launch", "--nproc-per-node", "2"};
    args.insert(args.end(), c.args.begin(), c.args.end());
    args.insert(args.end(), {"--", "true"});
    LaunchRun run = ntp(args);
    EXPECT_EQ(run.exit_code, 2) << c.named;
    EXPECT_TRUE(run.out.empty()) << run.out;
    EXPECT_EQ(count(run.err, "\n"), 1) << run.err;
    EXPECT_NE(run.err.find(c.named), std::string::npos) << run.err;
  }
}

// Finished lines of comm-worker ranks in `ranks`, all with the expected members.
void expect_finished(const LaunchRun& run, const std::vector<int>& ranks, const std::string& steps,
                     const std::string& members) {
  for (int rank : ranks) {
    const std::string want = "[rank " + std::to_string(rank) + "] rank " + std::to_string(rank) +
                             ": finished " + steps + " steps";
    const auto pos = run.out.find(want);
    ASSERT_NE(pos, std::string::npos) << run.out << run.err;
    const std::string line = run.out.substr(pos, run.out.find('\n', pos) - pos);
    EXPECT_NE(line.find("members [" + members + "]"), std::string::npos) << line;
  }
}

TEST(LaunchTest, KillAtAStepLeavesSurvivorsThatFinish) {
  TempDir dir;
  LaunchRun run =
      ntp({"launch", "--nproc-per-node", "4", "--store", "file:" + dir.path(), "--inject",
           "kill:rank=1,at=4", "--", "ntp", kWorker, "--steps", "12", "--timeout-ms", "1000"});
  EXPECT_EQ(run.exit_code, 0) << run.out << run.err;
  EXPECT_NE(run.err.find("injecting kill (SIGKILL) into rank 1 (at step 4)"), std::string::npos)
      << run.err;
  expect_finished(run, {0, 2, 3}, "12", "0,2,3");
  EXPECT_EQ(run.out.find("[rank 1] rank 1: finished"), std::string::npos);
}

TEST(LaunchTest, HangAtAStepIsDetectedAndTheHungWorkerIsReaped) {
  TempDir dir;
  LaunchRun run =
      ntp({"launch", "--nproc-per-node", "3", "--store", "file:" + dir.path(), "--inject",
           "hang:rank=0,at=3", "--", "ntp", kWorker, "--steps", "10", "--timeout-ms", "1000"});
  EXPECT_EQ(run.exit_code, 0) << run.out << run.err;
  EXPECT_NE(run.err.find("injecting hang (SIGSTOP) into rank 0"), std::string::npos) << run.err;
  expect_finished(run, {1, 2}, "10", "1,2");
}

// A worker stopped by a signal the launcher did not send (a fault point's `:stop`, kill -STOP)
// never ends by itself: the launcher takes it as hung and SIGKILLs it once the others finished,
// instead of waiting for it forever. (Workers that report nothing: its 137 is the exit code.)
TEST(LaunchTest, AWorkerStoppedByASignalIsTakenAsHungAndKilledOnceTheOthersFinish) {
  TempDir dir;
  const std::string pid_file = dir.path() + "/stopped";
  LaunchRun run =
      ntp({"launch", "--nproc-per-node", "2", "--store", "file:" + dir.path(), "--", "sh", "-c",
           "[ $NTP_RANK -eq 1 ] && echo $$ > " + pid_file + " && kill -STOP $$; exit 0"});
  EXPECT_EQ(run.exit_code, 137) << run.err;
  EXPECT_EQ(count(run.err, "rank 1 was stopped by a signal: taken as hung"), 1) << run.err;
  EXPECT_NE(run.err.find("rank 1 (restart 0, attempt 0): stopped by a signal; ended with exit code "
                         "137 (SIGKILL) (killed when the others finished)"),
            std::string::npos)
      << run.err;
  const std::string pid = read_file(pid_file);
  ASSERT_FALSE(pid.empty());
  EXPECT_TRUE(process_gone(std::stoi(pid)));
}

// A stopped worker that is continued runs again: the launcher waits for it to end by itself (it
// outlives the others by 0.5 s here, which a worker still taken as hung would not).
TEST(LaunchTest, AStoppedWorkerThatIsContinuedIsWaitedFor) {
  TempDir dir;
  const std::string pid_file = dir.path() + "/stopped";
  const std::string script =
      "if [ $NTP_RANK -eq 1 ]; then echo $$ > " + pid_file + ".tmp && mv " + pid_file + ".tmp " +
      pid_file + " && kill -STOP $$; sleep 0.5; exit 0; fi; while [ ! -f " + pid_file +
      " ]; do sleep 0.05; done; sleep 1; kill -CONT $(cat " + pid_file + "); exit 0";
  LaunchRun run = ntp({"launch", "--nproc-per-node", "2", "--store", "file:" + dir.path(), "--",
                       "sh", "-c", script});
  EXPECT_EQ(run.exit_code, 0) << run.err;
  EXPECT_EQ(count(run.err, "rank 1 was stopped by a signal"), 1) << run.err;
  EXPECT_EQ(count(run.err, "rank 1 was continued"), 1) << run.err;
  EXPECT_EQ(run.err.find("lost"), std::string::npos) << run.err;
}

TEST(LaunchTest, RepairBringsTheGroupBackToFullSize) {
  TempDir dir;
  LaunchRun run = ntp({"launch", "--nproc-per-node", "3", "--store", "file:" + dir.path(),
                       "--inject", "kill:rank=1,at=3", "--inject", "repair:rank=1,at=6", "--",
                       "ntp", kWorker, "--steps", "14", "--timeout-ms", "1000"});
  EXPECT_EQ(run.exit_code, 0) << run.out << run.err;
  EXPECT_NE(run.err.find("starting a fresh worker for rank 1 (restart 1"), std::string::npos)
      << run.err;
  EXPECT_NE(run.out.find("[rank 1] rank 1: joined"), std::string::npos) << run.out;
  expect_finished(run, {0, 1, 2}, "14", "0,1,2");
}

TEST(LaunchTest, ChaosInjectsFaultsAndTheJobStillFinishes) {
  TempDir dir;
  LaunchRun run =
      ntp({"launch", "--nproc-per-node", "4", "--store", "file:" + dir.path(), "--chaos", "11,4",
           "--", "ntp", kWorker, "--steps", "60", "--step-ms", "30", "--timeout-ms", "1000"});
  EXPECT_EQ(run.exit_code, 0) << run.out << run.err;
  // Kills, hangs and stalls take a worker out of the job; slowdowns leave it in.
  const int faults = count(run.err, "injecting kill (SIGKILL) into rank") +
                     count(run.err, "injecting hang (SIGSTOP) into rank") +
                     count(run.err, "injecting stall into rank");
  EXPECT_GE(faults, 1) << run.err;
  EXPECT_LE(faults, 3) << "chaos must leave the last worker alone: " << run.err;
  EXPECT_GE(count(run.err, "injecting slow ("), 1) << "chaos draws slowdowns too: " << run.err;
  // Every rank that chaos did not take out finished all steps.
  for (int rank = 0; rank < 4; ++rank) {
    const std::string into = "into rank " + std::to_string(rank) + " (chaos";
    if (run.err.find("kill (SIGKILL) " + into) != std::string::npos ||
        run.err.find("hang (SIGSTOP) " + into) != std::string::npos ||
        run.err.find("stall " + into) != std::string::npos) {
      continue;
    }
    EXPECT_NE(run.out.find("[rank " + std::to_string(rank) + "] rank " + std::to_string(rank) +
                           ": finished 60 steps"),
              std::string::npos)
        << run.out << run.err;
  }
}

TEST(LaunchTest, RedisStoreWithPassword) {
  using ntp::comm::testing::RedisServer;
  NTP_REQUIRE_REDIS();
  RedisServer server("launch-pw");
  ASSERT_TRUE(server.ready());
  // Workers get the store without the password, and the password on its own.
  LaunchRun env =
      ntp({"launch", "--nproc-per-node", "1", "--store", server.spec("launch-pw"), "--run-id",
           "env", "--", "sh", "-c", "echo store=$NTP_STORE pw=$NTP_REDIS_PASSWORD"});
  EXPECT_EQ(env.exit_code, 0) << env.err;
  EXPECT_NE(env.out.find("store=" + server.spec() + " pw=launch-pw\n"), std::string::npos)
      << env.out;
  // The whole fault path over redis.
  LaunchRun run = ntp({"launch", "--nproc-per-node", "3", "--store", server.spec("launch-pw"),
                       "--run-id", "faults", "--inject", "kill:rank=2,at=3", "--", "ntp", kWorker,
                       "--steps", "8", "--timeout-ms", "1000"});
  EXPECT_EQ(run.exit_code, 0) << run.out << run.err;
  expect_finished(run, {0, 1}, "8", "0,1");
  // A wrong password is bad input: one line, exit code 2, nothing started.
  LaunchRun bad = ntp({"launch", "--nproc-per-node", "2", "--store", server.spec("wrong"), "--",
                       "sh", "-c", "echo started"});
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_TRUE(bad.out.empty()) << bad.out;
  EXPECT_NE(bad.err.find("rejected the password"), std::string::npos) << bad.err;
  EXPECT_EQ(count(bad.err, "\n"), 1) << bad.err;
}

TEST(LaunchTest, TwoNodesShareOneJobAndAFaultOnOneNode) {
  // Two launchers on this machine stand in for two nodes; they meet through one store.
  TempDir dir;
  auto args = [&](int node) {
    return std::vector<std::string>{"launch",
                                    "--nproc-per-node",
                                    "2",
                                    "--nnodes",
                                    "2",
                                    "--node-rank",
                                    std::to_string(node),
                                    "--store",
                                    "file:" + dir.path(),
                                    "--run-id",
                                    "two-nodes",
                                    "--inject",
                                    "kill:rank=3,at=3",
                                    "--",
                                    "ntp",
                                    kWorker,
                                    "--steps",
                                    "8",
                                    "--timeout-ms",
                                    "1000"};
  };
  const auto node0 = start(args(0));
  const auto node1 = start(args(1));
  LaunchRun run1 = finish(node1, std::chrono::seconds(60));
  LaunchRun run0 = finish(node0, std::chrono::seconds(60));
  EXPECT_EQ(run0.exit_code, 0) << run0.out << run0.err;
  EXPECT_EQ(run1.exit_code, 0) << run1.out << run1.err;
  expect_finished(run0, {0, 1}, "8", "0,1,2");
  expect_finished(run1, {2}, "8", "0,1,2");
  EXPECT_NE(run1.err.find("injecting kill (SIGKILL) into rank 3"), std::string::npos) << run1.err;
  EXPECT_EQ(run0.err.find("injecting"), std::string::npos) << "only the owning node injects";
}

// A worker that prints its restart identity, then exits 0 on a restart and sleeps otherwise.
const std::string kRestartWorker =
    "echo start $NTP_RANK attempt=$NTP_ATTEMPT lost=$NTP_LOST_RANKS; "
    "[ \"$NTP_ATTEMPT\" -ge 1 ] && exit 0; exec sleep 30";

TEST(LaunchTest, RestartOnFailureRestartsTheJobWithoutTheLostRank) {
  TempDir dir;
  LaunchRun run = ntp({"launch", "--nproc-per-node", "3", "--store", "file:" + dir.path(),
                       "--grace", "1", "--log-dir", dir.path() + "/logs", "--restart-on-failure",
                       "--inject", "kill:rank=1,at=2s", "--", "sh", "-c", kRestartWorker});
  EXPECT_EQ(run.exit_code, 0) << run.out << run.err;
  EXPECT_NE(run.err.find("rank 1 failed (exit code 137)"), std::string::npos) << run.err;
  EXPECT_NE(run.err.find("restarting the job (attempt 1) without rank 1"), std::string::npos)
      << run.err;
  // The survivors start twice, the second time with the attempt and the lost rank; rank 1's slot
  // is never started again.
  for (int rank : {0, 2}) {
    const std::string prefix = "[rank " + std::to_string(rank) + "] start " + std::to_string(rank);
    EXPECT_EQ(count(run.out, prefix + " attempt=0 lost=\n"), 1) << run.out;
    EXPECT_EQ(count(run.out, prefix + " attempt=1 lost=1\n"), 1) << run.out;
  }
  EXPECT_EQ(count(run.out, "[rank 1] start 1 attempt=1"), 0) << run.out;
  EXPECT_EQ(count(run.err, "injecting kill"), 1) << "a fault fires once: " << run.err;
  const std::string log = read_file(dir.path() + "/logs/rank_0.log");
  EXPECT_NE(log.find("attempt 1 ==="), std::string::npos) << log;
}

TEST(LaunchTest, RanksAndLocalAddressReachTheWorkers) {
  TempDir dir;
  LaunchRun run =
      ntp({"launch", "--nproc-per-node", "2", "--nnodes", "2", "--node-rank", "0", "--store",
           "file:" + dir.path(), "--ranks", "3,0", "--local-addr", "127.0.0.1", "--", "sh", "-c",
           "echo rank=$NTP_RANK local=$NTP_LOCAL_RANK addr=$NTP_LOCAL_ADDR"});
  EXPECT_EQ(run.exit_code, 0) << run.out << run.err;
  EXPECT_EQ(count(run.out, "[rank 3] rank=3 local=0 addr=127.0.0.1\n"), 1) << run.out;
  EXPECT_EQ(count(run.out, "[rank 0] rank=0 local=1 addr=127.0.0.1\n"), 1) << run.out;
}

// --domain-size 2 over 4 workers: domains 0 and 1, each with a store of its own ("{domain}"). Each
// worker sees its domain's store; rank 3's failure is noticed on the job's store under its rank,
// and on domain 1's under its slot there (1), once, as its domain's failure watch reads it;
// domain 0's store has no notice.
TEST(LaunchTest, ADomainsStoreGetsItsWorkersExitNotices) {
  TempDir dir;
  const std::string domains = "file:" + dir.path() + "/domain{domain}";
  LaunchRun run =
      ntp({"launch", "--nproc-per-node", "4", "--store", "file:" + dir.path() + "/job", "--run-id",
           "dom", "--domain-size", "2", "--domain-store", domains, "--", "sh", "-c",
           "echo size=$NTP_DOMAIN_SIZE store=$NTP_DOMAIN_STORE; [ $NTP_RANK -ne 3 ]"});
  EXPECT_EQ(run.exit_code, 1) << run.out << run.err;
  for (int rank = 0; rank < 4; ++rank) {
    EXPECT_EQ(count(run.out, "[rank " + std::to_string(rank) + "] size=2 store=file:" + dir.path() +
                                 "/domain" + std::to_string(rank / 2) + "\n"),
              1)
        << run.out;
  }
  auto open = [](const std::string& spec, const std::string& run_id) {
    ntp::Result<std::shared_ptr<ntp::comm::Store>> store = ntp::comm::open_store(spec, run_id);
    EXPECT_TRUE(store.ok()) << store.status().to_string();
    return *store;
  };
  const auto job = open("file:" + dir.path() + "/job", "dom");
  const auto domain0 =
      open("file:" + dir.path() + "/domain0", ntp::launch::domain_namespace("dom", 0));
  const auto domain1 =
      open("file:" + dir.path() + "/domain1", ntp::launch::domain_namespace("dom", 1));
  const auto notice = [](ntp::comm::Store& store, int rank) {
    ntp::Result<std::string> who = store.get(ntp::comm::exit_notice_key(rank));
    return who.ok() ? *who : "(none: " + who.status().message() + ")";
  };
  EXPECT_EQ(notice(*job, 3), "0.0");
  EXPECT_EQ(notice(*domain1, 1), "0.0");
  for (int slot = 0; slot < 2; ++slot) {
    EXPECT_FALSE(*domain0->exists(ntp::comm::exit_notice_key(slot))) << slot;
  }
  EXPECT_FALSE(*domain1->exists(ntp::comm::exit_notice_key(0)));
  // One event on domain 1's stream: the exit of its slot 1.
  std::unique_ptr<ntp::comm::StreamReader> reader = domain1->open_reader();
  std::vector<ntp::comm::StreamCursor> cursors{{ntp::comm::kLaunchEvents, ""}};
  ntp::Result<std::vector<ntp::comm::StreamEvent>> events =
      reader->read(cursors, std::chrono::milliseconds(100));
  ASSERT_TRUE(events.ok()) << events.status().to_string();
  ASSERT_EQ(events->size(), 1U);
  const std::optional<ntp::comm::ExitEvent> exit = ntp::comm::parse_exit_event(events->at(0).value);
  ASSERT_TRUE(exit.has_value()) << events->at(0).value;
  EXPECT_EQ(exit->rank, 1);
  EXPECT_EQ(exit->who, "0.0");
}

// Rank 1 fails twice (restart counts 0 and 1) and then succeeds; rank 0 succeeds at once.
const std::string kFlakyWorker =
    "echo start $NTP_RANK restart=$NTP_RESTART_COUNT; "
    "[ $NTP_RANK -eq 1 ] && [ $NTP_RESTART_COUNT -lt 2 ] && exit 4; exit 0";

TEST(LaunchTest, ReplaceFailedStartsFreshWorkersUpToItsLimit) {
  TempDir dir;
  LaunchRun run = ntp({"launch", "--nproc-per-node", "2", "--store", "file:" + dir.path(),
                       "--replace-failed", "2", "--", "sh", "-c", kFlakyWorker});
  EXPECT_EQ(run.exit_code, 0) << "the last worker of each slot succeeded: " << run.err;
  for (const char* restart : {"0", "1", "2"}) {
    EXPECT_EQ(count(run.out, std::string("[rank 1] start 1 restart=") + restart + "\n"), 1)
        << run.out;
  }
  EXPECT_EQ(count(run.out, "[rank 0] start 0"), 1) << "a worker that finished is not replaced";
  EXPECT_NE(run.err.find("rank 1 failed: replacing it in 0.5 s (replacement 1 of 2)"),
            std::string::npos)
      << run.err;
  EXPECT_NE(run.err.find("rank 1 failed: replacing it in 1.0 s (replacement 2 of 2)"),
            std::string::npos)
      << run.err;
  EXPECT_NE(run.err.find("replacing rank 1: starting a fresh worker (restart 2)"),
            std::string::npos)
      << run.err;

  LaunchRun spent = ntp({"launch", "--nproc-per-node", "2", "--store", "file:" + dir.path(),
                         "--replace-failed", "1", "--", "sh", "-c", kFlakyWorker});
  EXPECT_EQ(spent.exit_code, 4) << spent.err;
  EXPECT_NE(spent.err.find("rank 1 failed; not replaced: --replace-failed 1 replacements used"),
            std::string::npos)
      << spent.err;
}

// A replacement asks to join through the store: while the store is down the launcher holds it
// and starts it once the store answers again.
TEST(LaunchTest, ReplaceFailedHoldsTheReplacementWhileTheStoreIsDown) {
  using ntp::comm::testing::RedisServer;
  NTP_REQUIRE_REDIS();
  RedisServer server;
  ASSERT_TRUE(server.ready());
  // The first worker fails after a second; its replacement says so and succeeds.
  const ntp::testing::ChildProcess child =
      start({"launch", "--nproc-per-node", "1", "--store", server.spec() + "?outage_ms=0",
             "--replace-failed", "1", "--", "sh", "-c",
             "[ $NTP_RESTART_COUNT -eq 0 ] && sleep 1 && exit 3; echo replacement"});
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  server.kill_now();
  std::this_thread::sleep_for(std::chrono::seconds(3));
  ASSERT_TRUE(server.start());
  const LaunchRun run = finish(child, std::chrono::seconds(60));
  EXPECT_EQ(run.exit_code, 0) << run.out << run.err;
  EXPECT_NE(run.err.find("the store does not answer: holding the replacement of rank 0"),
            std::string::npos)
      << run.err;
  EXPECT_NE(run.err.find("(restart 1) now that the store answers"), std::string::npos) << run.err;
  EXPECT_EQ(count(run.out, "[rank 0] replacement\n"), 1) << run.out;
}

TEST(LaunchTest, RestartOnFailureGivesUpAfterMaxRestarts) {
  TempDir dir;
  // Attempt k: rank k fails with code 5 (rank 0 first, then rank 1, ...).
  const std::string worker =
      "echo start $NTP_RANK attempt=$NTP_ATTEMPT lost=$NTP_LOST_RANKS; "
      "[ $NTP_RANK -eq $NTP_ATTEMPT ] && exit 5; exec sleep 30";
  LaunchRun run =
      ntp({"launch", "--nproc-per-node", "3", "--store", "file:" + dir.path(), "--grace", "1",
           "--restart-on-failure", "--max-restarts", "1", "--", "sh", "-c", worker});
  EXPECT_EQ(run.exit_code, 5) << run.out << run.err;
  // Rank 1 prints before it fails (rank 2 may be stopped before it printed anything).
  EXPECT_EQ(count(run.out, "[rank 1] start 1 attempt=1 lost=0\n"), 1) << run.out;
  EXPECT_NE(run.err.find("rank 1 failed (exit code 5)"), std::string::npos) << run.err;
  EXPECT_NE(run.err.find("giving up: the job failed after 1 restart (--max-restarts 1)"),
            std::string::npos)
      << run.err;
  EXPECT_EQ(count(run.out, "attempt=2"), 0) << run.out;
  // Without --restart-on-failure the same failure ends the job at once with its code.
  LaunchRun plain = ntp({"launch", "--nproc-per-node", "2", "--store", "file:" + dir.path(), "--",
                         "sh", "-c", "[ $NTP_RANK -eq 0 ] && exit 5; exit 0"});
  EXPECT_EQ(plain.exit_code, 5) << plain.err;
  EXPECT_EQ(plain.err.find("restarting"), std::string::npos) << plain.err;
}

// SIGTERM/SIGINT reach every worker and its children; nothing is left behind.
void expect_stop_without_orphans(int signo, bool with_hang) {
  TempDir dir;
  std::vector<std::string> args = {
      "launch", "--nproc-per-node", "3", "--store", "file:" + dir.path(), "--grace", "1"};
  if (with_hang) args.insert(args.end(), {"--inject", "hang:rank=1,at=0.3s"});
  args.insert(args.end(), {"--", "sh", "-c",
                           "sleep 60 & echo $! > " + dir.path() + "/child_$NTP_RANK; echo $$ > " +
                               dir.path() + "/worker_$NTP_RANK; wait"});
  const auto launcher = start(args);
  std::vector<pid_t> pids;
  // Generous: on a loaded machine three shells may take seconds to start.
  const auto start_deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (pids.size() < 6 && std::chrono::steady_clock::now() < start_deadline) {
    pids.clear();
    for (const char* kind : {"child_", "worker_"}) {
      for (int rank = 0; rank < 3; ++rank) {
        const std::string text = read_file(dir.path() + "/" + kind + std::to_string(rank));
        if (!text.empty() && text.back() == '\n') pids.push_back(std::stoi(text));
      }
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ASSERT_EQ(pids.size(), 6U) << "workers did not start";
  if (with_hang) std::this_thread::sleep_for(std::chrono::milliseconds(500));
  for (pid_t pid : pids) EXPECT_FALSE(process_gone(pid)) << pid;
  const auto sent = std::chrono::steady_clock::now();
  ASSERT_EQ(kill(launcher.pid, signo), 0);
  LaunchRun run = finish(launcher, std::chrono::seconds(20));
  const auto took = std::chrono::steady_clock::now() - sent;
  EXPECT_EQ(run.exit_code, 128 + signo) << run.err;
  EXPECT_LT(took, std::chrono::seconds(5));
  for (pid_t pid : pids) EXPECT_TRUE(process_gone(pid)) << "orphan " << pid;
}

TEST(LaunchTest, SigtermStopsEveryWorkerAndItsChildren) {
  expect_stop_without_orphans(SIGTERM, false);
}

TEST(LaunchTest, SigintStopsHungWorkersToo) { expect_stop_without_orphans(SIGINT, true); }

}  // namespace
