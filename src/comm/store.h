// Store: the small key-value service that processes rendezvous through.
//
// Gloo exchanges connection addresses through it, survivors agree on membership through it
// (comm/survivors.h), `ntp launch` workers report their step through it, and notices travel
// through its event streams (comm/stream.h). Backends:
//   file:DIR                        one machine; DIR is created if missing (FileStore)
//   redis://[:PASSWORD@]HOST:PORT   several machines; a real redis-server (RedisStore). The
//                                   password may also come from NTP_REDIS_PASSWORD.
// Every key is namespaced by the run id, so two jobs sharing a directory or a redis never see each
// other's keys. Values are arbitrary bytes. All methods are thread-safe.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "comm/stream.h"
#include "core/status.h"

namespace ntp::comm {

class Store {
 public:
  virtual ~Store() = default;

  // Sets `key` (overwriting). kUnavailable when the backend is unreachable.
  virtual Status set(const std::string& key, const std::string& value) = 0;
  // The value of `key`; kNotFound when it does not exist.
  virtual Result<std::string> get(const std::string& key) = 0;
  // Whether `key` exists.
  virtual Result<bool> exists(const std::string& key) = 0;
  // Atomically adds `delta` to the integer stored at `key` (absent = 0) and returns the result.
  virtual Result<std::int64_t> add(const std::string& key, std::int64_t delta) = 0;
  // Atomically sets `key` to `value` if it is absent. True when the key holds `value` afterwards
  // (set by this call, or already holding it: a retry of a claim whose reply was lost finds its
  // own value), false when it holds another. The claimant is named by the claim itself: nothing
  // can die between taking a role and saying who took it.
  virtual Result<bool> claim(const std::string& key, const std::string& value) = 0;
  // Blocks until every key exists; kDeadlineExceeded after `timeout`.
  virtual Status wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout);
  // The values of `keys` ([i]: nullopt when keys[i] is absent), in one round trip where the
  // backend can (RedisStore: one MGET); the default reads them one by one.
  virtual Result<std::vector<std::optional<std::string>>> get_many(
      const std::vector<std::string>& keys);
  // Sets every (key, value), in one round trip where the backend can (RedisStore: one MSET);
  // the default sets them one by one.
  virtual Status set_many(const std::vector<std::pair<std::string, std::string>>& entries);
  // Removes `keys` (absent ones are no error), in one round trip where the backend can
  // (RedisStore: one UNLINK). The default is kUnimplemented: callers that collect keys treat it
  // as best effort.
  virtual Status erase(const std::vector<std::string>& keys);
  // Appends `value` to the event stream `stream` (comm/stream.h); the default keeps it in keys.
  virtual Status append(const std::string& stream, const std::string& value);
  // Removes the event streams `streams` with their events (absent ones are no error); a reader
  // of one finds it empty. RedisStore: one UNLINK; the default erases the keys that append()'s
  // default wrote (kUnimplemented where erase() is).
  virtual Status erase_streams(const std::vector<std::string>& streams);
  // A reader of event streams; it must not outlive this store. The default polls the keys.
  virtual std::unique_ptr<StreamReader> open_reader();
  // Human-readable description ("file:/tmp/x run=abc").
  virtual std::string describe() const = 0;
};

// Opens the store named by `spec` (see above) with keys namespaced by `run_id` (non-empty,
// [A-Za-z0-9._-]). kInvalidArgument for a malformed spec or run id; kUnavailable/kUnauthenticated-
// like kFailedPrecondition when redis is unreachable or rejects the password.
Result<std::shared_ptr<Store>> open_store(const std::string& spec, const std::string& run_id);

}  // namespace ntp::comm
