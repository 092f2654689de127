// RedisStore: a Store on a real redis-server, for jobs that span machines.
//
// Spec: redis://[:PASSWORD@]HOST:PORT (the password may instead come from NTP_REDIS_PASSWORD).
// Keys live under "ntp/<run_id>/", so jobs with different run ids never cross. One connection per
// store, serialized by a mutex (hiredis contexts are not thread-safe).
#pragma once

#include <mutex>
#include <string>

#include "comm/store.h"

struct redisContext;

namespace ntp::comm {

class RedisStore : public Store {
 public:
  // Connects, authenticates and PINGs. kInvalidArgument for a malformed spec or a password the
  // server rejects (or a server that wants one and got none); kUnavailable when unreachable.
  static Result<std::shared_ptr<RedisStore>> open(const std::string& spec,
                                                  const std::string& run_id);
  ~RedisStore() override;
  RedisStore(const RedisStore&) = delete;
  RedisStore& operator=(const RedisStore&) = delete;

  Status set(const std::string& key, const std::string& value) override;
  Result<std::string> get(const std::string& key) override;
  Result<bool> exists(const std::string& key) override;
  Result<std::int64_t> add(const std::string& key, std::int64_t delta) override;
  std::string describe() const override;

 private:
  RedisStore(redisContext* context, std::string prefix, std::string description)
      : context_(context), prefix_(std::move(prefix)), description_(std::move(description)) {}

  std::mutex mutex_;
  redisContext* context_;
  std::string prefix_;
  std::string description_;
};

}  // namespace ntp::comm
