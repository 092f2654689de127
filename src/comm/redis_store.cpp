#include "comm/redis_store.h"

#include <hiredis/hiredis.h>

#include <cstdlib>
#include <memory>

namespace ntp::comm {
namespace {

struct ReplyDeleter {
  void operator()(redisReply* reply) const { freeReplyObject(reply); }
};
using ReplyPtr = std::unique_ptr<redisReply, ReplyDeleter>;

Status reply_error(const std::string& what, redisContext* context, const redisReply* reply) {
  if (reply == nullptr) {
    return unavailable("redis " + what + " failed: " +
                       (context->errstr[0] != '\0' ? context->errstr : "connection lost"));
  }
  return internal_error("redis " + what + " failed: " + std::string(reply->str, reply->len));
}

}  // namespace

Result<std::shared_ptr<RedisStore>> RedisStore::open(const std::string& spec,
                                                     const std::string& run_id) {
  // redis://[:PASSWORD@]HOST:PORT
  std::string rest = spec.substr(std::string("redis://").size());
  std::string password;
  const auto at = rest.rfind('@');
  if (at != std::string::npos) {
    std::string auth = rest.substr(0, at);
    rest = rest.substr(at + 1);
    password = auth.empty() || auth[0] != ':' ? auth : auth.substr(1);
  } else if (const char* env = std::getenv("NTP_REDIS_PASSWORD"); env != nullptr) {
    password = env;
  }
  const auto colon = rest.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == rest.size()) {
    return invalid_argument("redis store '" + spec +
                            "' has no HOST:PORT: use redis://[:PASSWORD@]HOST:PORT");
  }
  const std::string host = rest.substr(0, colon);
  int port = 0;
  try {
    std::size_t used = 0;
    port = std::stoi(rest.substr(colon + 1), &used);
    if (used != rest.size() - colon - 1 || port <= 0 || port > 65535) throw std::out_of_range("");
  } catch (const std::exception&) {
    return invalid_argument("redis store '" + spec + "' has a bad port: use 1-65535");
  }
  const std::string where = "redis://" + host + ":" + std::to_string(port);

  timeval connect_timeout{5, 0};
  redisContext* context = redisConnectWithTimeout(host.c_str(), port, connect_timeout);
  if (context == nullptr || context->err != 0) {
    std::string error = context != nullptr ? context->errstr : "out of memory";
    if (context != nullptr) redisFree(context);
    return unavailable("cannot connect to " + where + ": " + error +
                       " (is redis-server running there?)");
  }
  timeval io_timeout{10, 0};
  redisSetTimeout(context, io_timeout);
  std::shared_ptr<RedisStore> store(
      new RedisStore(context, "ntp/" + run_id + "/", where + " run=" + run_id));

  if (!password.empty()) {
    ReplyPtr reply(static_cast<redisReply*>(redisCommand(context, "AUTH %s", password.c_str())));
    if (reply == nullptr) return reply_error("AUTH", context, nullptr);
    if (reply->type == REDIS_REPLY_ERROR) {
      return invalid_argument(where + " rejected the password (" +
                              std::string(reply->str, reply->len) +
                              "): fix it in redis://:PASSWORD@HOST:PORT or NTP_REDIS_PASSWORD");
    }
  }
  ReplyPtr pong(static_cast<redisReply*>(redisCommand(context, "PING")));
  if (pong == nullptr) return reply_error("PING", context, nullptr);
  if (pong->type == REDIS_REPLY_ERROR) {
    const std::string error(pong->str, pong->len);
    if (error.rfind("NOAUTH", 0) == 0) {
      return invalid_argument(where +
                              " requires a password: pass redis://:PASSWORD@HOST:PORT or set "
                              "NTP_REDIS_PASSWORD");
    }
    return unavailable(where + " answered PING with: " + error);
  }
  return store;
}

RedisStore::~RedisStore() { redisFree(context_); }

Status RedisStore::set(const std::string& key, const std::string& value) {
  const std::string full = prefix_ + key;
  std::lock_guard lock(mutex_);
  ReplyPtr reply(static_cast<redisReply*>(
      redisCommand(context_, "SET %b %b", full.data(), full.size(), value.data(), value.size())));
  if (reply == nullptr || reply->type == REDIS_REPLY_ERROR) {
    return reply_error("SET " + key, context_, reply.get());
  }
  return ok_status();
}

Result<std::string> RedisStore::get(const std::string& key) {
  const std::string full = prefix_ + key;
  std::lock_guard lock(mutex_);
  ReplyPtr reply(
      static_cast<redisReply*>(redisCommand(context_, "GET %b", full.data(), full.size())));
  if (reply == nullptr || reply->type == REDIS_REPLY_ERROR) {
    return reply_error("GET " + key, context_, reply.get());
  }
  if (reply->type == REDIS_REPLY_NIL) return not_found("redis store: no key '" + key + "'");
  return std::string(reply->str, reply->len);
}

Result<bool> RedisStore::exists(const std::string& key) {
  const std::string full = prefix_ + key;
  std::lock_guard lock(mutex_);
  ReplyPtr reply(
      static_cast<redisReply*>(redisCommand(context_, "EXISTS %b", full.data(), full.size())));
  if (reply == nullptr || reply->type != REDIS_REPLY_INTEGER) {
    return reply_error("EXISTS " + key, context_, reply.get());
  }
  return reply->integer > 0;
}

Result<std::int64_t> RedisStore::add(const std::string& key, std::int64_t delta) {
  const std::string full = prefix_ + key;
  const std::string amount = std::to_string(delta);
  std::lock_guard lock(mutex_);
  ReplyPtr reply(static_cast<redisReply*>(
      redisCommand(context_, "INCRBY %b %s", full.data(), full.size(), amount.c_str())));
  if (reply == nullptr || reply->type != REDIS_REPLY_INTEGER) {
    return reply_error("INCRBY " + key, context_, reply.get());
  }
  return static_cast<std::int64_t>(reply->integer);
}

std::string RedisStore::describe() const { return description_; }

}  // namespace ntp::comm
