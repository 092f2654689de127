// RedisStore: a Store on a real redis-server, for jobs that span machines.
//
// Spec: redis://[:PASSWORD@]HOST:PORT[?OPTION=VALUE&...] (the password may instead come from
// NTP_REDIS_PASSWORD). Options:
//   outage_ms=10000     how long an operation rides out a lost server (see below); 0 = not at all
//   io_timeout_ms=10000 a reply that takes longer than this counts as a broken connection
// Keys live under "ntp/<run_id>/", so jobs with different run ids never cross. One connection per
// store, serialized by a mutex (hiredis contexts are not thread-safe), so one store may be shared
// by the threads of a process (heartbeat, failure watch, trainer, Gloo rendezvous).
//
// Outages: when a command fails because the connection broke (server killed or restarted,
// connection reset, no reply within io_timeout_ms), the store reconnects, AUTHs again and
// retries the command, pausing 10 ms doubling to 100 ms between attempts (so every client is back
// within about 0.1 s of the server), until the server has been unreachable for outage_ms, counted
// from the first failure. Callers block meanwhile (other threads queue on the mutex). Past that
// the call returns kUnavailable naming the server; every later call makes one connection attempt
// and fails the same way until the server answers again. open() does not wait: an unreachable
// server at open is kUnavailable at once (a wrong address fails fast).
//
// Retried commands: set/get/exists are idempotent. add() is exactly once: it runs as a Lua script
// that also records, per store, the id of its last add and the result; a retry of an add whose
// reply was lost finds the record and returns the first result instead of adding again (the
// survivors agreement elects its decider with add: a double count would leave it without one).
// claim() is a Lua script that compares what it finds with its value, so a retry is idempotent.
//
// A restarted server without persistence (the default of the test servers; redis' own default
// snapshots only every few minutes) has lost every key. The store reconnects anyway, and logs it
// on stderr. What a job tolerates is in docs/comm.md ("Stores").
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "comm/store.h"
#include "core/non_copyable.h"

struct redisContext;
struct redisReply;

namespace ntp::comm {

class RedisStreamReader;

class RedisStore : public Store, NonCopyable {
 public:
  // Connects, authenticates and PINGs. kInvalidArgument for a malformed spec or a password the
  // server rejects (or a server that wants one and got none); kUnavailable when unreachable.
  static Result<std::shared_ptr<RedisStore>> open(const std::string& spec,
                                                  const std::string& run_id);
  ~RedisStore() override;

  Status set(const std::string& key, const std::string& value) override;
  Result<std::string> get(const std::string& key) override;
  Result<bool> exists(const std::string& key) override;
  Result<std::int64_t> add(const std::string& key, std::int64_t delta) override;
  Result<bool> claim(const std::string& key, const std::string& value) override;
  // One MGET; XADD (trimmed to about the last 10,000 events); a reader on its own connection that
  // blocks in XREAD BLOCK (redis_stream.cpp), woken by shutting its socket down.
  Status set_many(const std::vector<std::pair<std::string, std::string>>& entries) override;
  Status erase(const std::vector<std::string>& keys) override;
  Result<std::vector<std::optional<std::string>>> get_many(
      const std::vector<std::string>& keys) override;
  Status append(const std::string& stream, const std::string& value) override;
  // A stream is one key (XADD): erase() of the stream names.
  Status erase_streams(const std::vector<std::string>& streams) override { return erase(streams); }
  std::unique_ptr<StreamReader> open_reader() override;
  std::string describe() const override;

  std::chrono::milliseconds outage_window() const { return outage_; }
  // Connections re-established after a broken one; of those, the ones that found a different
  // server process (redis' run_id changed: it restarted, and may have lost every key).
  std::int64_t reconnects() const { return reconnects_.load(); }
  std::int64_t server_restarts() const { return server_restarts_.load(); }

 private:
  friend class RedisStreamReader;
  struct Endpoint {
    std::string host;
    int port = 0;
    std::string password;
    std::string where;  // "redis://HOST:PORT", for messages (never the password)
  };

  struct ReplyDeleter {
    void operator()(redisReply* reply) const;
  };
  using ReplyPtr = std::unique_ptr<redisReply, ReplyDeleter>;

  RedisStore(Endpoint endpoint, redisContext* context, std::string server_run_id,
             std::string run_id, std::chrono::milliseconds outage,
             std::chrono::milliseconds io_timeout);

  // Runs one command (argv form), reconnecting and retrying as described above. A non-null reply
  // (possibly a non-transient error reply) or kUnavailable / kInvalidArgument.
  Result<ReplyPtr> command(const std::vector<std::string>& args, const std::string& what);
  Status reconnect_locked(const std::string& what);
  // One connection: connect, AUTH, PING and INFO (for the server's run_id), each within
  // `timeout`; then replies are awaited up to `io_timeout`. The error codes of open().
  static Result<redisContext*> connect_once(const Endpoint& endpoint,
                                            std::chrono::milliseconds timeout,
                                            std::chrono::milliseconds io_timeout,
                                            std::string* server_run_id);

  const Endpoint endpoint_;
  const std::string prefix_;
  const std::string description_;
  const std::string client_id_;  // names this store's add record
  const std::chrono::milliseconds outage_;
  const std::chrono::milliseconds io_timeout_;

  std::mutex mutex_;
  redisContext* context_;      // null while disconnected
  std::string server_run_id_;  // of the server last connected to
  std::optional<std::chrono::steady_clock::time_point> down_since_;  // first unanswered command
  std::string last_error_;
  std::atomic<std::uint64_t> add_sequence_{0};
  std::atomic<std::int64_t> reconnects_{0};
  std::atomic<std::int64_t> server_restarts_{0};
};

}  // namespace ntp::comm
