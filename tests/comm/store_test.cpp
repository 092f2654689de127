// Store conformance for the file store and for a real redis-server started by the test (with and
// without a password), plus Gloo rendezvous through redis.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <thread>

#include "comm/file_store.h"
#include "comm/gloo_communicator.h"
#include "comm/store.h"
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
}

TEST(FileStoreTest, Conformance) {
  TempDir dir;
  check_conformance([&](const std::string& run) { return *open_store("file:" + dir.path(), run); });
}

TEST(StoreSpecTest, BadSpecsAndRunIdsAreInvalidArguments) {
  TempDir dir;
  for (const char* spec : {"", "bogus", "files:/x", "redis://", "redis://host", "redis://h:0",
                           "redis://h:99999", "redis://h:12x"}) {
    Result<std::shared_ptr<Store>> store = open_store(spec, "run");
    EXPECT_EQ(store.status().code(), StatusCode::kInvalidArgument) << spec;
  }
  for (const char* run : {"", "a b", "a/b", "..x/y"}) {
    EXPECT_EQ(open_store("file:" + dir.path(), run).status().code(), StatusCode::kInvalidArgument)
        << run;
  }
}

#define REQUIRE_REDIS() \
  NTP_REQUIRE_DEPENDENCY(RedisServer::available(), "redis-server (apt-get install redis-server)")

TEST(RedisStoreTest, ConformanceWithoutPassword) {
  REQUIRE_REDIS();
  RedisServer server;
  ASSERT_TRUE(server.ready());
  check_conformance([&](const std::string& run) {
    Result<std::shared_ptr<Store>> store = open_store(server.spec(), run);
    EXPECT_TRUE(store.ok()) << store.status().to_string();
    return store.ok() ? *store : nullptr;
  });
}

TEST(RedisStoreTest, PasswordIsRequiredCheckedAndAccepted) {
  REQUIRE_REDIS();
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
  REQUIRE_REDIS();
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
  REQUIRE_REDIS();
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

}  // namespace
}  // namespace ntp::comm
