// Store conformance for the file store and for a real redis-server started by the test (with and
// without a password), Gloo rendezvous through redis, and the redis store riding out a server that
// is killed (SIGKILL) or stopped (SIGSTOP) and comes back on the same port.
#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <thread>

#include "comm/file_store.h"
#include "comm/gloo_communicator.h"
#include "comm/redis_store.h"
#include "comm/store.h"
#include "comm/wait_observer.h"
#include "dependency.h"
#include "multiprocess.h"
#include "redis_server.h"

namespace ntp::comm {
namespace {

using testing::RedisServer;
using testing::spawn_ranks;
using testing::TempDir;
using testing::wait_all;

// The properties every Store must have. `open` opens a new client on the same backing store.
void check_conformance(const std::function<std::shared_ptr<Store>(const std::string&)>& open) {
  std::shared_ptr<Store> store = open("run-a");
  ASSERT_NE(store, nullptr);
  EXPECT_EQ(store->get("missing").status().code(), StatusCode::kNotFound);
  EXPECT_FALSE(*store->exists("k/with/slashes"));
  ASSERT_TRUE(store->set("k/with/slashes", std::string("v\0x", 3)).ok());
  EXPECT_TRUE(*store->exists("k/with/slashes"));
  EXPECT_EQ(*store->get("k/with/slashes"), std::string("v\0x", 3));
  ASSERT_TRUE(store->set("k/with/slashes", "second").ok());
  EXPECT_EQ(*store->get("k/with/slashes"), "second");
  ASSERT_TRUE(store->set("..", "dots").ok());
  EXPECT_EQ(*store->get(".."), "dots");

  // set_many / get_many / erase: several keys per call, binary values, absent keys are nullopt
  // and erasing an absent key is no error.
  ASSERT_TRUE(store->set_many({{"many/a", std::string("1\0", 2)}, {"many/b", "2"}}).ok());
  Result<std::vector<std::optional<std::string>>> got =
      store->get_many({"many/a", "many/none", "many/b"});
  ASSERT_TRUE(got.ok());
  ASSERT_EQ(got->size(), 3u);
  EXPECT_EQ((*got)[0], std::optional<std::string>(std::string("1\0", 2)));
  EXPECT_EQ((*got)[1], std::nullopt);
  EXPECT_EQ((*got)[2], std::optional<std::string>("2"));
  ASSERT_TRUE(store->erase({"many/a", "many/none"}).ok());
  EXPECT_FALSE(*store->exists("many/a"));
  EXPECT_TRUE(*store->exists("many/b"));

  // Keys are namespaced by the run id.
  std::shared_ptr<Store> other = open("run-b");
  EXPECT_FALSE(*other->exists("k/with/slashes"));
  ASSERT_TRUE(other->set("k/with/slashes", "b").ok());
  EXPECT_EQ(*store->get("k/with/slashes"), "second");

  // wait() returns once the key appears, and gives up with kDeadlineExceeded.
  const auto start = std::chrono::steady_clock::now();
  Status late = store->wait({"never"}, std::chrono::milliseconds(150));
  const auto waited = std::chrono::steady_clock::now() - start;
  EXPECT_EQ(late.code(), StatusCode::kDeadlineExceeded);
  EXPECT_GE(waited, std::chrono::milliseconds(150));
  EXPECT_LT(waited, std::chrono::milliseconds(2000));
  std::thread setter([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    ASSERT_TRUE(open("run-a")->set("soon", "1").ok());
  });
  EXPECT_TRUE(store->wait({"k/with/slashes", "soon"}, std::chrono::seconds(5)).ok());
  setter.join();

  // add() is atomic across processes: 4 processes x 100 increments.
  EXPECT_EQ(*store->add("counter", 5), 5);
  std::vector<pid_t> pids = spawn_ranks(4, [&](int r) {
    std::shared_ptr<Store> mine = open("run-a");
    for (int i = 0; i < 100; ++i) {
      CHILD_CHECK(mine->add("counter", 1).ok(), r, "add");
    }
    return 0;
  });
  for (const auto& e : wait_all(pids, std::chrono::seconds(30))) {
    EXPECT_TRUE(e.exited && e.code == 0);
  }
  EXPECT_EQ(*store->add("counter", 0), 405);
  EXPECT_EQ(*store->add("counter", -405), 0);
  EXPECT_EQ(*other->add("counter", 1), 1);  // another run's counter

  // claim(): 4 processes claim one key, each with its own value, at once: exactly one wins, the
  // key holds its value, and a second claim gives each the same answer (a retried claim is
  // answered as its first try).
  const std::string role = "role/e1/decider";
  pids = spawn_ranks(4, [&](int r) {
    std::shared_ptr<Store> mine = open("run-a");
    Result<bool> first = mine->claim(role, std::to_string(r));
    CHILD_CHECK(first.ok(), r, "claim");
    Result<bool> again = mine->claim(role, std::to_string(r));
    CHILD_CHECK(again.ok() && *again == *first, r, "claim again");
    return *first ? 10 + r : 0;
  });
  int winners = 0;
  for (const auto& e : wait_all(pids, std::chrono::seconds(30))) {
    ASSERT_TRUE(e.exited);
    if (e.code == 0) continue;
    ++winners;
    EXPECT_EQ(*store->get(role), std::to_string(e.code - 10));
  }
  EXPECT_EQ(winners, 1);
  ASSERT_TRUE(store->set("plain", "x").ok());
  EXPECT_FALSE(*store->claim("plain", "y"));
  EXPECT_TRUE(*store->claim("plain", "x"));
  EXPECT_EQ(*store->get("plain"), "x");
  EXPECT_TRUE(*other->claim(role, "b"));  // another run's key
}

TEST(FileStoreTest, Conformance) {
  TempDir dir;
  check_conformance([&](const std::string& run) { return *open_store("file:" + dir.path(), run); });
}

TEST(StoreSpecTest, BadSpecsAndRunIdsAreInvalidArguments) {
  TempDir dir;
  for (const char* spec :
       {"", "bogus", "files:/x", "redis://", "redis://host", "redis://h:0", "redis://h:99999",
        "redis://h:12x", "redis://h:1?outage_ms=x", "redis://h:1?outage_ms=-1",
        "redis://h:1?outage_ms", "redis://h:1?io_timeout_ms=0", "redis://h:1?bogus=1"}) {
    Result<std::shared_ptr<Store>> store = open_store(spec, "run");
    EXPECT_EQ(store.status().code(), StatusCode::kInvalidArgument) << spec;
  }
  for (const char* spec : {"redis://:hunter2@h:0", "redis://:hunter2@h", "redis://:hunter2@h:x"}) {
    const Status bad = open_store(spec, "run").status();
    EXPECT_EQ(bad.code(), StatusCode::kInvalidArgument) << spec;
    EXPECT_EQ(bad.message().find("hunter2"), std::string::npos) << "leaks the password";
  }
  for (const char* run : {"", "a b", "a/b", "..x/y"}) {
    EXPECT_EQ(open_store("file:" + dir.path(), run).status().code(), StatusCode::kInvalidArgument)
        << run;
  }
}

TEST(RedisStoreTest, ConformanceWithoutPassword) {
  NTP_REQUIRE_REDIS();
  RedisServer server;
  ASSERT_TRUE(server.ready());
  check_conformance([&](const std::string& run) {
    Result<std::shared_ptr<Store>> store = open_store(server.spec(), run);
    EXPECT_TRUE(store.ok()) << store.status().to_string();
    return store.ok() ? *store : nullptr;
  });
}

// Counts the waits its thread reports (comm/wait_observer.h).
class CountingObserver : public WaitObserver {
 public:
  void waiting(bool begins) override { ++(begins ? begun : ended); }
  int begun = 0, ended = 0;
};

// A thread blocked on the store waits on a service, not stuck (elastic/progress.h): each redis
// operation and each stream read on an observed thread is exactly one wait, begun and ended; an
// unobserved thread reports nothing.
TEST(RedisStoreTest, EachOperationOnAnObservedThreadIsOneWait) {
  NTP_REQUIRE_REDIS();
  RedisServer server;
  ASSERT_TRUE(server.ready());
  Result<std::shared_ptr<Store>> store = open_store(server.spec(), "waits");
  ASSERT_TRUE(store.ok()) << store.status().to_string();
  CountingObserver observer;
  ASSERT_TRUE((*store)->set("k", "v").ok());  // not observed yet
  observe_waits(&observer);
  ASSERT_TRUE((*store)->set("k", "w").ok());
  ASSERT_TRUE((*store)->get("k").ok());
  ASSERT_TRUE((*store)->append("events", "e").ok());
  const std::unique_ptr<StreamReader> reader = (*store)->open_reader();
  std::vector<StreamCursor> cursors{{"events", ""}};
  ASSERT_TRUE(reader->read(cursors, std::chrono::milliseconds(0)).ok());
  observe_waits(nullptr);
  ASSERT_TRUE((*store)->get("k").ok());  // no longer observed
  EXPECT_EQ(observer.begun, 4);
  EXPECT_EQ(observer.ended, 4);
}

TEST(RedisStoreTest, PasswordIsRequiredCheckedAndAccepted) {
  NTP_REQUIRE_REDIS();
  RedisServer server("s3cret");
  ASSERT_TRUE(server.ready());
  Result<std::shared_ptr<Store>> good = open_store(server.spec("s3cret"), "run");
  ASSERT_TRUE(good.ok()) << good.status().to_string();
  ASSERT_TRUE((*good)->set("x", "1").ok());

  Result<std::shared_ptr<Store>> wrong = open_store(server.spec("guess"), "run");
  EXPECT_EQ(wrong.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(wrong.status().message().find("rejected the password"), std::string::npos)
      << wrong.status().message();
  EXPECT_EQ(wrong.status().message().find("guess"), std::string::npos) << "leaks the password";

  Result<std::shared_ptr<Store>> none = open_store(server.spec(), "run");
  EXPECT_EQ(none.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(none.status().message().find("requires a password"), std::string::npos)
      << none.status().message();

  setenv("NTP_REDIS_PASSWORD", "s3cret", 1);
  Result<std::shared_ptr<Store>> from_env = open_store(server.spec(), "run");
  unsetenv("NTP_REDIS_PASSWORD");
  ASSERT_TRUE(from_env.ok()) << from_env.status().to_string();
  EXPECT_EQ(*(*from_env)->get("x"), "1");
}

TEST(RedisStoreTest, UnreachableServerIsUnavailable) {
  NTP_REQUIRE_REDIS();
  int port = 0;
  {
    RedisServer server;  // learn a port that is then closed again
    port = std::stoi(server.spec().substr(server.spec().rfind(':') + 1));
  }
  Result<std::shared_ptr<Store>> store =
      open_store("redis://127.0.0.1:" + std::to_string(port), "run");
  EXPECT_EQ(store.status().code(), StatusCode::kUnavailable);
}

TEST(RedisStoreTest, GlooRendezvousThroughRedis) {
  NTP_REQUIRE_REDIS();
  RedisServer server("pw");
  ASSERT_TRUE(server.ready());
  const int n = 3;
  std::vector<pid_t> pids = spawn_ranks(n, [&](int r) {
    Result<std::shared_ptr<Store>> store = open_store(server.spec("pw"), "gloo-run");
    CHILD_CHECK(store.ok(), r, store.status().to_string());
    GlooOptions options;
    options.store = *store;
    options.rank = r;
    options.size = n;
    options.timeout = std::chrono::milliseconds(10000);
    Result<std::unique_ptr<Communicator>> comm = connect_gloo(options);
    CHILD_CHECK(comm.ok(), r, comm.status().to_string());
    std::vector<double> data(1009);
    for (std::size_t i = 0; i < data.size(); ++i) data[i] = static_cast<double>(i) * (r + 1);
    CHILD_CHECK((*comm)->allreduce(view(data)).ok(), r, "allreduce");
    for (std::size_t i = 0; i < data.size(); ++i) {
      CHILD_CHECK(data[i] == static_cast<double>(i) * 6.0, r, "sum");
    }
    return 0;
  });
  for (const auto& e : wait_all(pids, std::chrono::seconds(30))) {
    EXPECT_FALSE(e.timed_out);
    EXPECT_TRUE(e.exited && e.code == 0) << "code " << e.code << " signal " << e.signal;
  }
}

// ---- outages: the server is killed, or stopped, and comes back on the same port ----

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

std::shared_ptr<RedisStore> open_redis(const std::string& spec, const std::string& run) {
  Result<std::shared_ptr<RedisStore>> store = RedisStore::open(spec, run);
  EXPECT_TRUE(store.ok()) << store.status().to_string();
  return store.ok() ? *store : nullptr;
}

// SIGKILL mid-run, restart on the same port 1 s later: an operation issued meanwhile blocks, then
// succeeds on the new server, and so do those of other threads sharing the store and of a store
// that was idle. The restart lost every key (the test server has no persistence); add() counts
// from scratch on the new server.
TEST(RedisStoreTest, OperationsRideOutAKilledAndRestartedServer) {
  NTP_REQUIRE_REDIS();
  RedisServer server;
  ASSERT_TRUE(server.ready());
  std::shared_ptr<RedisStore> store = open_redis(server.spec(), "outage");
  std::shared_ptr<RedisStore> idle = open_redis(server.spec(), "outage");
  ASSERT_TRUE(store && idle);
  EXPECT_EQ(store->outage_window(), milliseconds(10000));  // the default
  ASSERT_TRUE(store->set("before", "1").ok());
  ASSERT_EQ(*store->add("n", 1), 1);

  // Other threads of the process keep using the store (a heartbeat, a failure watch).
  std::atomic<bool> stop{false};
  std::atomic<int> failures{0};
  std::atomic<int> calls{0};
  std::vector<std::thread> users;
  for (int t = 0; t < 3; ++t) {
    users.emplace_back([&, t] {
      while (!stop.load()) {
        if (!store->add("beat/" + std::to_string(t), 1).ok()) failures.fetch_add(1);
        if (!store->exists("before").ok()) failures.fetch_add(1);
        calls.fetch_add(1);
        std::this_thread::sleep_for(milliseconds(5));
      }
    });
  }
  std::this_thread::sleep_for(milliseconds(100));

  server.kill_now();
  const Clock::time_point killed = Clock::now();
  Clock::time_point up{};
  std::thread restarter([&] {
    std::this_thread::sleep_for(milliseconds(1000));
    EXPECT_TRUE(server.start());
    up = Clock::now();
  });
  // A 4 MiB value: writing it to the dead connection may raise SIGPIPE, which must not kill us.
  const std::string big(4 << 20, 'x');
  Status during = store->set("during", big);
  const Clock::time_point back = Clock::now();
  restarter.join();
  ASSERT_TRUE(during.ok()) << during.to_string();
  const double blocked = std::chrono::duration<double>(back - killed).count();
  const double after_up = std::chrono::duration<double>(back - up).count();
  std::printf("blocked %.3f s; answered %.3f s after the restarted server accepted connections\n",
              blocked, after_up);
  EXPECT_GE(blocked, 0.95);
  EXPECT_LT(after_up, 0.5);

  EXPECT_EQ(*store->get("during"), big);
  EXPECT_EQ(store->get("before").status().code(), StatusCode::kNotFound);  // lost in the restart
  EXPECT_EQ(*store->add("n", 1), 1);                                       // counts from scratch
  EXPECT_EQ(*idle->get("during"), big);  // reconnects at its next call
  std::this_thread::sleep_for(milliseconds(100));
  stop.store(true);
  for (std::thread& t : users) t.join();
  EXPECT_EQ(failures.load(), 0);
  EXPECT_GT(calls.load(), 30);
  EXPECT_EQ(store->reconnects(), 1);
  EXPECT_EQ(store->server_restarts(), 1);
  EXPECT_EQ(idle->reconnects(), 1);
  EXPECT_EQ(idle->server_restarts(), 1);
}

// A server that stays away: kUnavailable once the outage window has passed (counted from the
// first failure), naming the server and the window; later calls fail at once while it is down,
// and the store works again once it is back.
TEST(RedisStoreTest, PastTheOutageWindowIsUnavailableNamingTheServer) {
  NTP_REQUIRE_REDIS();
  RedisServer server;
  ASSERT_TRUE(server.ready());
  std::shared_ptr<RedisStore> store = open_redis(server.spec() + "?outage_ms=1500", "window");
  ASSERT_TRUE(store);
  EXPECT_EQ(store->outage_window(), milliseconds(1500));
  ASSERT_TRUE(store->set("x", "1").ok());
  server.kill_now();

  Clock::time_point start = Clock::now();
  Status lost = store->set("x", "2");
  const double first = seconds_since(start);
  EXPECT_EQ(lost.code(), StatusCode::kUnavailable) << lost.to_string();
  EXPECT_NE(lost.message().find(server.spec()), std::string::npos) << lost.message();
  EXPECT_NE(lost.message().find("outage_ms=1500"), std::string::npos) << lost.message();
  std::printf("gave up after %.3f s (window 1.5 s): %s\n", first, lost.message().c_str());
  EXPECT_GE(first, 1.5);
  EXPECT_LT(first, 1.5 + 0.5);

  start = Clock::now();
  EXPECT_EQ(store->exists("x").status().code(), StatusCode::kUnavailable);
  EXPECT_EQ(store->add("n", 1).status().code(), StatusCode::kUnavailable);
  EXPECT_LT(seconds_since(start), 0.5);

  ASSERT_TRUE(server.start());
  ASSERT_TRUE(store->set("x", "3").ok());
  EXPECT_EQ(*store->get("x"), "3");
  EXPECT_EQ(store->server_restarts(), 1);
}

// After a restart of a password-protected server the store authenticates again.
TEST(RedisStoreTest, ReconnectAuthenticatesAgain) {
  NTP_REQUIRE_REDIS();
  RedisServer server("s3cret");
  ASSERT_TRUE(server.ready());
  std::shared_ptr<RedisStore> store = open_redis(server.spec("s3cret"), "auth");
  ASSERT_TRUE(store);
  ASSERT_TRUE(store->set("x", "1").ok());
  server.kill_now();
  std::thread restarter([&] {
    std::this_thread::sleep_for(milliseconds(500));
    EXPECT_TRUE(server.start());
  });
  Status s = store->set("x", "2");
  restarter.join();
  ASSERT_TRUE(s.ok()) << s.to_string();
  EXPECT_EQ(*store->get("x"), "2");
  EXPECT_EQ(*store->add("n", 5), 5);
  EXPECT_EQ(store->reconnects(), 1);
}

// Stops the server (SIGSTOP), so that the next command's reply is lost to the store's timeout, and
// resumes it (SIGCONT) a second later from the returned thread.
std::thread stop_for_a_second(pid_t server) {
  EXPECT_EQ(::kill(server, SIGSTOP), 0);
  return std::thread([server] {
    std::this_thread::sleep_for(milliseconds(1000));
    ::kill(server, SIGCONT);
  });
}

// A reply lost while the command ran: the server is stopped (SIGSTOP) with an add in flight; the
// store times out (io_timeout_ms=300), reconnects and retries; when the server resumes (SIGCONT)
// it runs the first attempt and then the retry. add() must count once (a plain INCRBY retried
// would count twice: comm/survivors.h's decider election would then have no ticket 1).
TEST(RedisStoreTest, AnAddCountsOnceAndAClaimIsWonWhenTheirRepliesAreLost) {
  NTP_REQUIRE_REDIS();
  RedisServer server;
  ASSERT_TRUE(server.ready());
  std::shared_ptr<RedisStore> store =
      open_redis(server.spec() + "?io_timeout_ms=300&outage_ms=5000", "once");
  ASSERT_TRUE(store);
  ASSERT_EQ(*store->add("claim", 1), 1);
  std::thread waker = stop_for_a_second(server.pid());
  const Clock::time_point start = Clock::now();
  Result<std::int64_t> second = store->add("claim", 1);
  const double took = seconds_since(start);
  waker.join();
  ASSERT_TRUE(second.ok()) << second.status().to_string();
  EXPECT_EQ(*second, 2);
  EXPECT_EQ(*store->add("claim", 0), 2) << "the retried add was counted twice";
  EXPECT_GE(store->reconnects(), 1) << "the reply was not lost: the test proves nothing";
  EXPECT_EQ(store->server_restarts(), 0);
  EXPECT_GE(took, 0.95);
  // A second store's adds are its own (each store keeps its own record).
  std::shared_ptr<RedisStore> other = open_redis(server.spec(), "once");
  EXPECT_EQ(*other->add("claim", 1), 3);
  EXPECT_EQ(*store->add("claim", 1), 4);

  // The same lost reply for a claim: the first attempt sets the key, the retry finds the
  // claimant's own value there and answers true, as the first attempt would have (a claim
  // answered false would leave an epoch whose decider key names a member that does not decide).
  const std::int64_t reconnects = store->reconnects();
  waker = stop_for_a_second(server.pid());
  Result<bool> claimed = store->claim("decider", "7");
  waker.join();
  ASSERT_TRUE(claimed.ok()) << claimed.status().to_string();
  EXPECT_TRUE(*claimed);
  EXPECT_GT(store->reconnects(), reconnects) << "the reply was not lost: the test proves nothing";
  EXPECT_EQ(*store->get("decider"), "7");
  EXPECT_FALSE(*other->claim("decider", "8"));
}

}  // namespace
}  // namespace ntp::comm
