// The store's event streams (comm/stream.h) and get_many, on the file store (the portable polling
// implementation) and on a real redis-server (MGET, XADD, XREAD BLOCK on the reader's own
// connection): every event appended after a cursor is read exactly once, in append order per
// stream, by appenders in other processes too; a read blocks until an event, its timeout or a
// wake(); streams are namespaced by run id; erase_streams removes a stream and its events and
// no other (a reader of it finds it empty, and later appends again); a redis reader resumes after
// a server restart.
#include <gtest/gtest.h>

#include <map>
#include <thread>

#include <hiredis.h>

#include "comm/redis_store.h"
#include "comm/store.h"
#include "dependency.h"
#include "multiprocess.h"
#include "redis_server.h"

namespace ntp::comm {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;
using testing::RedisServer;
using testing::spawn_ranks;
using testing::TempDir;
using testing::wait_all;

using Opener = std::function<std::shared_ptr<Store>(const std::string& run)>;

// Reads `cursors` until `count` events arrived or 20 s passed.
std::vector<StreamEvent> read_until(StreamReader& reader, std::vector<StreamCursor>& cursors,
                                    size_t count) {
  std::vector<StreamEvent> all;
  const auto end = Clock::now() + std::chrono::seconds(20);
  while (all.size() < count && Clock::now() < end) {
    Result<std::vector<StreamEvent>> some = reader.read(cursors, milliseconds(200));
    EXPECT_TRUE(some.ok()) << some.status().to_string();
    if (!some.ok()) break;
    all.insert(all.end(), some->begin(), some->end());
  }
  return all;
}

void check_get_many(const Opener& open) {
  std::shared_ptr<Store> store = open("many");
  ASSERT_TRUE(store->set("a", "1").ok());
  ASSERT_TRUE(store->set("c", std::string("3\0", 2)).ok());
  Result<std::vector<std::optional<std::string>>> v = store->get_many({"a", "b", "c", "a"});
  ASSERT_TRUE(v.ok()) << v.status().to_string();
  ASSERT_EQ(v->size(), 4u);
  EXPECT_EQ((*v)[0], std::optional<std::string>("1"));
  EXPECT_EQ((*v)[1], std::nullopt);
  EXPECT_EQ((*v)[2], std::optional<std::string>(std::string("3\0", 2)));
  EXPECT_EQ((*v)[3], std::optional<std::string>("1"));
  EXPECT_TRUE(store->get_many({})->empty());
}

// Order and exactly-once, within a process and across four.
void check_streams(const Opener& open) {
  std::shared_ptr<Store> store = open("streams");
  std::unique_ptr<StreamReader> reader = store->open_reader();
  std::vector<StreamCursor> cursors{{"s/one", ""}, {"s/two", ""}};
  ASSERT_TRUE(store->append("s/two", "early").ok());  // before the first read: read from the start
  for (int i = 0; i < 5; ++i) ASSERT_TRUE(store->append("s/one", std::to_string(i)).ok());
  std::vector<StreamEvent> first = read_until(*reader, cursors, 6);
  ASSERT_EQ(first.size(), 6u);
  std::vector<std::string> one;
  for (const StreamEvent& e : first) {
    if (e.stream == 0) {
      one.push_back(e.value);
    } else {
      EXPECT_EQ(e.value, "early");
    }
  }
  EXPECT_EQ(one, (std::vector<std::string>{"0", "1", "2", "3", "4"}));

  // Nothing new: the read waits out its block (and not much longer), and returns nothing.
  const auto asked = Clock::now();
  Result<std::vector<StreamEvent>> none = reader->read(cursors, milliseconds(150));
  ASSERT_TRUE(none.ok());
  EXPECT_TRUE(none->empty());
  EXPECT_GE(Clock::now() - asked, milliseconds(140));  // redis' BLOCK has 1 ms resolution
  EXPECT_LT(Clock::now() - asked, milliseconds(2000));

  // Another run's stream of the same name is another stream.
  ASSERT_TRUE(open("other-run")->append("s/one", "not ours").ok());
  ASSERT_TRUE(reader->read(cursors, milliseconds(50))->empty());

  // Four processes append 50 events each: every event once, each process' events in order.
  std::vector<pid_t> pids = spawn_ranks(4, [&](int r) {
    std::shared_ptr<Store> mine = open("streams");
    for (int i = 0; i < 50; ++i) {
      CHILD_CHECK(mine->append("s/two", std::to_string(r) + " " + std::to_string(i)).ok(), r,
                  "append");
    }
    return 0;
  });
  std::vector<StreamEvent> burst = read_until(*reader, cursors, 200);
  for (const auto& e : wait_all(pids, std::chrono::seconds(30)))
    EXPECT_TRUE(e.exited && e.code == 0);
  ASSERT_EQ(burst.size(), 200u);
  std::map<int, int> next;  // process -> the event it must send next
  for (const StreamEvent& e : burst) {
    ASSERT_EQ(e.stream, 1u);
    const int r = std::stoi(e.value.substr(0, e.value.find(' ')));
    EXPECT_EQ(std::stoi(e.value.substr(e.value.find(' ') + 1)), next[r]++) << e.value;
  }
  for (int r = 0; r < 4; ++r) EXPECT_EQ(next[r], 50);
  EXPECT_TRUE(reader->read(cursors, milliseconds(50))->empty());  // and nothing twice
}

// A blocked read returns as soon as an event arrives, and at once on wake().
void check_blocking(const Opener& open) {
  std::shared_ptr<Store> store = open("blocking");
  std::unique_ptr<StreamReader> reader = store->open_reader();
  std::vector<StreamCursor> cursors{{"b", ""}};
  ASSERT_TRUE(reader->read(cursors, milliseconds(10)).ok());  // connected, at the end

  std::thread appender([&] {
    std::this_thread::sleep_for(milliseconds(100));
    ASSERT_TRUE(open("blocking")->append("b", "x").ok());
  });
  const auto asked = Clock::now();
  std::vector<StreamEvent> got = read_until(*reader, cursors, 1);
  const auto waited = Clock::now() - asked;
  appender.join();
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].value, "x");
  // Woken by the event, not by the 200 ms block of read_until's read (the polling reader looks
  // every 5 ms; redis answers the blocked XREAD when the XADD lands).
  EXPECT_LT(waited, milliseconds(190));

  std::thread waker([&] {
    std::this_thread::sleep_for(milliseconds(100));
    reader->wake();
  });
  const auto blocked = Clock::now();
  Result<std::vector<StreamEvent>> woken = reader->read(cursors, milliseconds(10000));
  const auto slept = Clock::now() - blocked;
  waker.join();
  ASSERT_TRUE(woken.ok()) << woken.status().to_string();
  EXPECT_TRUE(woken->empty());
  EXPECT_GE(slept, milliseconds(90));
  EXPECT_LT(slept, milliseconds(2000));  // not the 10 s block
  // After a wake the reader reads on as before.
  ASSERT_TRUE(store->append("b", "y").ok());
  std::vector<StreamEvent> after = read_until(*reader, cursors, 1);
  ASSERT_EQ(after.size(), 1u);
  EXPECT_EQ(after[0].value, "y");
  // A wake while no read is in progress: the next read returns at once, and the one after reads
  // on, without an error (a redis reader once shut its idle connection on such a wake, and the
  // read after failed: its caller, a failure watch, then backed off for a poll period, after
  // every arm).
  reader->wake();
  const auto idle_woken = Clock::now();
  Result<std::vector<StreamEvent>> at_once = reader->read(cursors, milliseconds(10000));
  ASSERT_TRUE(at_once.ok()) << at_once.status().to_string();
  EXPECT_TRUE(at_once->empty());
  EXPECT_LT(Clock::now() - idle_woken, milliseconds(2000));
  ASSERT_TRUE(store->append("b", "z").ok());
  Result<std::vector<StreamEvent>> next = reader->read(cursors, milliseconds(2000));
  ASSERT_TRUE(next.ok()) << next.status().to_string();
  ASSERT_EQ(next->size(), 1u);
  EXPECT_EQ((*next)[0].value, "z");
}

void check_erase_streams(const Opener& open) {
  std::shared_ptr<Store> store = open("erase");
  for (const char* stream : {"x", "y", "z"}) {
    ASSERT_TRUE(store->append(stream, std::string(stream) + "1").ok());
    ASSERT_TRUE(store->append(stream, std::string(stream) + "2").ok());
  }
  ASSERT_TRUE(store->erase_streams({"x", "z", "never"}).ok());
  std::unique_ptr<StreamReader> reader = store->open_reader();
  std::vector<StreamCursor> cursors{{"x", ""}, {"y", ""}, {"z", ""}};
  Result<std::vector<StreamEvent>> left = reader->read(cursors, milliseconds(200));
  ASSERT_TRUE(left.ok()) << left.status().to_string();
  ASSERT_EQ(left->size(), 2u);  // y's two events, and nothing of x or z
  EXPECT_EQ((*left)[0].value, "y1");
  EXPECT_EQ((*left)[1].value, "y2");
  ASSERT_TRUE(store->append("x", "x3").ok());  // an erased stream starts again
  const std::vector<StreamEvent> again = read_until(*reader, cursors, 1);
  ASSERT_EQ(again.size(), 1u);
  EXPECT_EQ(again[0].stream, 0u);
  EXPECT_EQ(again[0].value, "x3");
}

TEST(FileStoreStreamTest, GetManyStreamsAndBlocking) {
  TempDir dir;
  const Opener open = [&](const std::string& run) {
    return *open_store("file:" + dir.path(), run);
  };
  check_get_many(open);
  check_streams(open);
  check_blocking(open);
  check_erase_streams(open);
}

TEST(RedisStoreStreamTest, GetManyStreamsAndBlocking) {
  NTP_REQUIRE_REDIS();
  RedisServer server;
  ASSERT_TRUE(server.ready());
  const Opener open = [&](const std::string& run) {
    Result<std::shared_ptr<Store>> store = open_store(server.spec(), run);
    EXPECT_TRUE(store.ok()) << store.status().to_string();
    return store.ok() ? *store : nullptr;
  };
  check_get_many(open);
  check_streams(open);
  check_blocking(open);
  check_erase_streams(open);
}

// The server's count of connections it accepted (INFO stats), on a connection of its own (which
// it counts too: each call adds one); -1 when it cannot be read.
long connections_received(int port) {
  redisContext* c = redisConnect("127.0.0.1", port);
  if (c == nullptr || c->err != 0) {
    if (c != nullptr) redisFree(c);
    return -1;
  }
  auto* reply = static_cast<redisReply*>(redisCommand(c, "INFO stats"));
  long count = -1;
  if (reply != nullptr && reply->type == REDIS_REPLY_STRING) {
    const std::string text(reply->str, reply->len);
    const std::string field = "total_connections_received:";
    if (const auto at = text.find(field); at != std::string::npos) {
      count = std::stol(text.substr(at + field.size()));
    }
  }
  if (reply != nullptr) freeReplyObject(reply);
  redisFree(c);
  return count;
}

// StreamReader::prepare opens the connection a first read would, so that the read (a recovery's,
// elastic::Agreement::prepare) opens none: counted by the server, exactly one connection for the
// prepare and none for the reads after it; a second prepare opens none either.
TEST(RedisStoreStreamTest, APreparedReaderReadsOnTheConnectionItOpenedAhead) {
  NTP_REQUIRE_REDIS();
  RedisServer server;
  ASSERT_TRUE(server.ready());
  std::shared_ptr<Store> store = *open_store(server.spec(), "prepared");
  ASSERT_TRUE(store->append("p", "e1").ok());  // the store's own connection is open from here
  std::unique_ptr<StreamReader> reader = store->open_reader();
  const long before = connections_received(server.port());
  ASSERT_GE(before, 1);
  ASSERT_TRUE(reader->prepare().ok());
  ASSERT_TRUE(reader->prepare().ok());
  // + 1 for the prepare, + 1 for this count's own connection.
  EXPECT_EQ(connections_received(server.port()), before + 2);
  std::vector<StreamCursor> cursors{{"p", ""}};
  ASSERT_EQ(read_until(*reader, cursors, 1).size(), 1u);
  ASSERT_TRUE(store->append("p", "e2").ok());
  ASSERT_EQ(read_until(*reader, cursors, 1).size(), 1u);
  EXPECT_EQ(connections_received(server.port()), before + 3);  // this count's only
}

// A reader whose server was killed says kUnavailable (it does not hang); once a server is back
// on the port it reads the events appended there. The restart lost the old stream, as it loses
// every key; new event ids are later than the old cursor (they count the server's clock).
TEST(RedisStoreStreamTest, AReaderResumesAfterTheServerRestarts) {
  NTP_REQUIRE_REDIS();
  RedisServer server;
  ASSERT_TRUE(server.ready());
  std::shared_ptr<Store> store = *open_store(server.spec(), "restart");
  std::unique_ptr<StreamReader> reader = store->open_reader();
  std::vector<StreamCursor> cursors{{"r", ""}};
  ASSERT_TRUE(store->append("r", "before").ok());
  ASSERT_EQ(read_until(*reader, cursors, 1).size(), 1u);

  server.kill_now();
  EXPECT_EQ(reader->read(cursors, milliseconds(100)).status().code(), StatusCode::kUnavailable);
  ASSERT_TRUE(server.start());
  ASSERT_TRUE(store->append("r", "after").ok());  // the store reconnects by itself
  std::vector<StreamEvent> got = read_until(*reader, cursors, 1);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].value, "after");
}

}  // namespace
}  // namespace ntp::comm
