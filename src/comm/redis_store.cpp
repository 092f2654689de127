#include "comm/redis_store.h"

#include <hiredis/hiredis.h>
#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <random>
#include <thread>

#include "comm/redis_wire.h"
#include "comm/wait_observer.h"

namespace ntp::comm {
namespace {

using redis_wire::context_error;
using redis_wire::reply_text;
using redis_wire::run_argv;
using redis_wire::SigpipeBlock;
using redis_wire::to_timeval;
using redis_wire::transient_error;

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

constexpr milliseconds kDefaultOutage{10000};
constexpr milliseconds kDefaultIoTimeout{10000};
constexpr milliseconds kOpenTimeout{5000};
// Reconnection: pauses from kFirstPause doubling to kMaxPause; each attempt (connect + AUTH + PING
// + INFO) gets the time left in the outage window, clamped to [kMinAttempt, kMaxAttempt].
constexpr milliseconds kFirstPause{10};
constexpr milliseconds kMaxPause{100};
constexpr milliseconds kMinAttempt{200};
constexpr milliseconds kMaxAttempt{2000};
// How long the add record outlives the outage window (a retry comes within the window).
constexpr milliseconds kAddRecordLife{3600 * 1000};

// add(): INCRBY that remembers (KEYS[2] = this store's record) the id of its last add (ARGV[2])
// and its result, so that a retry of the same add returns that result instead of adding twice.
// The result is returned as the counter's text (exact, unlike Lua's double numbers).
// claim(): SET if absent; 1 when the key holds ARGV[1] afterwards (so a retry of a claim whose
// reply was lost is answered as the first try was).
constexpr const char* kClaimScript = R"lua(
local held = redis.call('GET', KEYS[1])
if not held then
  redis.call('SET', KEYS[1], ARGV[1])
  return 1
end
if held == ARGV[1] then return 1 end
return 0
)lua";

constexpr const char* kAddScript = R"lua(
local last = redis.call('GET', KEYS[2])
if last then
  local space = string.find(last, ' ', 1, true)
  if space and string.sub(last, 1, space - 1) == ARGV[2] then
    return string.sub(last, space + 1)
  end
end
redis.call('INCRBY', KEYS[1], ARGV[1])
local value = redis.call('GET', KEYS[1])
redis.call('SET', KEYS[2], ARGV[2] .. ' ' .. value, 'PX', ARGV[3])
return value
)lua";

std::string seconds_text(Clock::duration d) {
  char text[32];
  std::snprintf(text, sizeof(text), "%.2f s", std::chrono::duration<double>(d).count());
  return text;
}

std::string new_client_id() {
  std::random_device device;
  const std::uint64_t bits = (static_cast<std::uint64_t>(device()) << 32) ^ device() ^
                             static_cast<std::uint64_t>(Clock::now().time_since_epoch().count());
  char text[64];
  std::snprintf(text, sizeof(text), "%d-%016llx", static_cast<int>(::getpid()),
                static_cast<unsigned long long>(bits));
  return text;
}

}  // namespace

void RedisStore::ReplyDeleter::operator()(redisReply* reply) const { freeReplyObject(reply); }

Result<redisContext*> RedisStore::connect_once(const Endpoint& endpoint, milliseconds timeout,
                                               milliseconds io_timeout,
                                               std::string* server_run_id) {
  const std::string& where = endpoint.where;
  redisContext* context =
      redisConnectWithTimeout(endpoint.host.c_str(), endpoint.port, to_timeval(timeout));
  if (context == nullptr || context->err != 0) {
    std::string error = context != nullptr ? context->errstr : "out of memory";
    if (context != nullptr) redisFree(context);
    return unavailable("cannot connect to " + where + ": " + error +
                       " (is redis-server running there?)");
  }
  std::unique_ptr<redisContext, void (*)(redisContext*)> owned(context, redisFree);
  redisSetTimeout(context, to_timeval(timeout));
  auto lost = [&](const char* what) {
    return unavailable(where + " did not answer " + what + ": " + context_error(context));
  };
  if (!endpoint.password.empty()) {
    ReplyPtr reply(run_argv(context, {"AUTH", endpoint.password}));
    if (reply == nullptr) return lost("AUTH");
    if (transient_error(reply.get()))
      return unavailable(where + " answered AUTH with " + reply_text(reply.get()));
    if (reply->type == REDIS_REPLY_ERROR) {
      return invalid_argument(where + " rejected the password (" + reply_text(reply.get()) +
                              "): fix it in redis://:PASSWORD@HOST:PORT or NTP_REDIS_PASSWORD");
    }
  }
  ReplyPtr pong(run_argv(context, {"PING"}));
  if (pong == nullptr) return lost("PING");
  if (pong->type == REDIS_REPLY_ERROR) {
    const std::string error = reply_text(pong.get());
    if (error.rfind("NOAUTH", 0) == 0) {
      return invalid_argument(where +
                              " requires a password: pass redis://:PASSWORD@HOST:PORT or set "
                              "NTP_REDIS_PASSWORD");
    }
    return unavailable(where + " answered PING with: " + error);
  }
  ReplyPtr info(run_argv(context, {"INFO", "server"}));
  if (info == nullptr) return lost("INFO");
  server_run_id->clear();
  if (info->type == REDIS_REPLY_STRING) {
    const std::string text = reply_text(info.get());
    const auto at = text.find("run_id:");
    if (at != std::string::npos) {
      const auto begin = at + 7;
      *server_run_id = text.substr(begin, text.find_first_of("\r\n", begin) - begin);
    }
  }
  redisSetTimeout(context, to_timeval(io_timeout));
  return owned.release();
}

Result<std::shared_ptr<RedisStore>> RedisStore::open(const std::string& spec,
                                                     const std::string& run_id) {
  // redis://[:PASSWORD@]HOST:PORT[?OPTION=VALUE&...]
  std::string rest = spec.substr(std::string("redis://").size());
  Endpoint endpoint;
  const auto at = rest.rfind('@');
  if (at != std::string::npos) {
    std::string auth = rest.substr(0, at);
    rest = rest.substr(at + 1);
    endpoint.password = auth.empty() || auth[0] != ':' ? auth : auth.substr(1);
  } else if (const char* env = std::getenv("NTP_REDIS_PASSWORD"); env != nullptr) {
    endpoint.password = env;
  }
  const std::string shown = "redis://" + rest;  // the spec without its password, for messages
  std::map<std::string, milliseconds> options = {{"outage_ms", kDefaultOutage},
                                                 {"io_timeout_ms", kDefaultIoTimeout}};
  if (const auto question = rest.find('?'); question != std::string::npos) {
    std::string query = rest.substr(question + 1);
    rest = rest.substr(0, question);
    while (!query.empty()) {
      const auto amp = query.find('&');
      const std::string item = query.substr(0, amp);
      query = amp == std::string::npos ? "" : query.substr(amp + 1);
      const auto equals = item.find('=');
      const std::string name = item.substr(0, equals);
      auto it = options.find(name);
      if (it == options.end() || equals == std::string::npos) {
        return invalid_argument("redis store option '" + item +
                                "' is not understood: use outage_ms=MS or io_timeout_ms=MS");
      }
      try {
        std::size_t used = 0;
        const long long value = std::stoll(item.substr(equals + 1), &used);
        if (used != item.size() - equals - 1 || value < 0 || value > 24LL * 3600 * 1000 ||
            (name == "io_timeout_ms" && value == 0)) {
          throw std::out_of_range("");
        }
        it->second = milliseconds(value);
      } catch (const std::exception&) {
        return invalid_argument("redis store option '" + item + "' needs a number of milliseconds" +
                                (name == "io_timeout_ms" ? " from 1" : " from 0") + " to 86400000");
      }
    }
  }
  const auto colon = rest.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == rest.size()) {
    return invalid_argument("redis store '" + shown +
                            "' has no HOST:PORT: use redis://[:PASSWORD@]HOST:PORT");
  }
  endpoint.host = rest.substr(0, colon);
  try {
    std::size_t used = 0;
    endpoint.port = std::stoi(rest.substr(colon + 1), &used);
    if (used != rest.size() - colon - 1 || endpoint.port <= 0 || endpoint.port > 65535) {
      throw std::out_of_range("");
    }
  } catch (const std::exception&) {
    return invalid_argument("redis store '" + shown + "' has a bad port: use 1-65535");
  }
  endpoint.where = "redis://" + endpoint.host + ":" + std::to_string(endpoint.port);

  SigpipeBlock no_sigpipe;
  std::string server_run_id;
  NTP_ASSIGN_OR_RETURN(
      redisContext * context,
      connect_once(endpoint, kOpenTimeout, options["io_timeout_ms"], &server_run_id));
  return std::shared_ptr<RedisStore>(
      new RedisStore(std::move(endpoint), context, std::move(server_run_id), run_id,
                     options["outage_ms"], options["io_timeout_ms"]));
}

RedisStore::RedisStore(Endpoint endpoint, redisContext* context, std::string server_run_id,
                       std::string run_id, milliseconds outage, milliseconds io_timeout)
    : endpoint_(std::move(endpoint)),
      prefix_("ntp/" + run_id + "/"),
      description_(endpoint_.where + " run=" + run_id),
      client_id_(new_client_id()),
      outage_(outage),
      io_timeout_(io_timeout),
      context_(context),
      server_run_id_(std::move(server_run_id)) {}

RedisStore::~RedisStore() {
  if (context_ != nullptr) redisFree(context_);
}

Status RedisStore::reconnect_locked(const std::string& what) {
  const Clock::time_point deadline = *down_since_ + outage_;
  milliseconds pause = kFirstPause;
  for (;;) {
    const auto left = std::chrono::duration_cast<milliseconds>(deadline - Clock::now());
    std::string run_id;
    Result<redisContext*> context =
        connect_once(endpoint_, std::clamp(left, kMinAttempt, kMaxAttempt), io_timeout_, &run_id);
    if (context.ok()) {
      context_ = *context;
      reconnects_.fetch_add(1);
      const bool restarted = !server_run_id_.empty() && run_id != server_run_id_;
      if (restarted) server_restarts_.fetch_add(1);
      server_run_id_ = run_id;
      std::fprintf(stderr, "ntp: redis store %s: reconnected after %s%s\n", endpoint_.where.c_str(),
                   seconds_text(Clock::now() - *down_since_).c_str(),
                   restarted ? " to a restarted server (keys written before may be lost)" : "");
      return ok_status();
    }
    // A password the restarted server rejects will not get better by waiting.
    if (context.status().code() == StatusCode::kInvalidArgument) return context.status();
    last_error_ = context.status().message();
    const Clock::time_point now = Clock::now();
    if (now >= deadline) {
      return unavailable("redis store " + endpoint_.where + ": " + what + " failed: the server " +
                         "has not answered for " + seconds_text(now - *down_since_) +
                         " (outage_ms=" + std::to_string(outage_.count()) +
                         "); last error: " + last_error_);
    }
    std::this_thread::sleep_for(std::min<Clock::duration>(pause, deadline - now));
    pause = std::min(pause * 2, kMaxPause);
  }
}

Result<RedisStore::ReplyPtr> RedisStore::command(const std::vector<std::string>& args,
                                                 const std::string& what) {
  SigpipeBlock no_sigpipe;
  // A thread blocked on the store waits on a service, not stuck: on a training thread its
  // liveness token says so (comm/wait_observer.h). Bounded by io_timeout_ms and outage_ms.
  const ScopedWait observed;
  std::lock_guard lock(mutex_);
  milliseconds pause = kFirstPause;
  for (;;) {
    if (context_ == nullptr) NTP_RETURN_IF_ERROR(reconnect_locked(what));
    ReplyPtr reply(run_argv(context_, args));
    if (reply != nullptr && !transient_error(reply.get())) {
      down_since_.reset();
      return reply;
    }
    const Clock::time_point now = Clock::now();
    if (!down_since_) down_since_ = now;
    if (reply == nullptr) {
      // The connection is broken (hiredis contexts are unusable after an error): reconnect.
      last_error_ = context_error(context_);
      redisFree(context_);
      context_ = nullptr;
      continue;
    }
    last_error_ = "answered " + reply_text(reply.get());
    if (now >= *down_since_ + outage_) {
      return unavailable("redis store " + endpoint_.where + ": " + what + " failed: the server " +
                         last_error_ + " for " + seconds_text(now - *down_since_) +
                         " (outage_ms=" + std::to_string(outage_.count()) + ")");
    }
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, kMaxPause);
  }
}

Status RedisStore::set(const std::string& key, const std::string& value) {
  NTP_ASSIGN_OR_RETURN(ReplyPtr reply, command({"SET", prefix_ + key, value}, "SET " + key));
  if (reply->type == REDIS_REPLY_ERROR) {
    return internal_error("redis SET " + key + " failed: " + reply_text(reply.get()));
  }
  return ok_status();
}

Result<std::string> RedisStore::get(const std::string& key) {
  NTP_ASSIGN_OR_RETURN(ReplyPtr reply, command({"GET", prefix_ + key}, "GET " + key));
  if (reply->type == REDIS_REPLY_NIL) return not_found("redis store: no key '" + key + "'");
  if (reply->type != REDIS_REPLY_STRING) {
    return internal_error(
        "redis GET " + key + " failed: " +
        (reply->type == REDIS_REPLY_ERROR ? reply_text(reply.get()) : std::string("not a string")));
  }
  return reply_text(reply.get());
}

Result<bool> RedisStore::exists(const std::string& key) {
  NTP_ASSIGN_OR_RETURN(ReplyPtr reply, command({"EXISTS", prefix_ + key}, "EXISTS " + key));
  if (reply->type != REDIS_REPLY_INTEGER) {
    return internal_error("redis EXISTS " + key + " failed: " +
                          (reply->type == REDIS_REPLY_ERROR ? reply_text(reply.get())
                                                            : std::string("not an integer")));
  }
  return reply->integer > 0;
}

Result<std::int64_t> RedisStore::add(const std::string& key, std::int64_t delta) {
  // The add's id: a retry inside command() sends the same one. One record per store suffices,
  // since command() holds the mutex until the add got its reply or gave up.
  const std::string id = std::to_string(add_sequence_.fetch_add(1) + 1);
  NTP_ASSIGN_OR_RETURN(
      ReplyPtr reply,
      command({"EVAL", kAddScript, "2", prefix_ + key, prefix_ + "_redis_store/add/" + client_id_,
               std::to_string(delta), id, std::to_string((kAddRecordLife + outage_).count())},
              "INCRBY " + key));
  if (reply->type != REDIS_REPLY_STRING) {
    return internal_error("redis INCRBY " + key + " failed: " +
                          (reply->type == REDIS_REPLY_ERROR ? reply_text(reply.get())
                                                            : std::string("unexpected reply")));
  }
  const std::string text = reply_text(reply.get());
  try {
    return static_cast<std::int64_t>(std::stoll(text));
  } catch (const std::exception&) {
    return internal_error("redis INCRBY " + key + " returned '" + text + "'");
  }
}

Result<bool> RedisStore::claim(const std::string& key, const std::string& value) {
  NTP_ASSIGN_OR_RETURN(ReplyPtr reply,
                       command({"EVAL", kClaimScript, "1", prefix_ + key, value}, "claim " + key));
  if (reply->type != REDIS_REPLY_INTEGER) {
    return internal_error("redis claim of " + key + " failed: " +
                          (reply->type == REDIS_REPLY_ERROR ? reply_text(reply.get())
                                                            : std::string("not an integer")));
  }
  return reply->integer == 1;
}

Result<std::vector<std::optional<std::string>>> RedisStore::get_many(
    const std::vector<std::string>& keys) {
  if (keys.empty()) return std::vector<std::optional<std::string>>();
  std::vector<std::string> args{"MGET"};
  args.reserve(keys.size() + 1);
  for (const std::string& key : keys) args.push_back(prefix_ + key);
  NTP_ASSIGN_OR_RETURN(ReplyPtr reply, command(args, "MGET " + keys.front() + " ..."));
  if (reply->type != REDIS_REPLY_ARRAY || reply->elements != keys.size()) {
    return internal_error("redis MGET " + keys.front() + " ... failed: " +
                          (reply->type == REDIS_REPLY_ERROR ? reply_text(reply.get())
                                                            : std::string("unexpected reply")));
  }
  std::vector<std::optional<std::string>> values(keys.size());
  for (size_t i = 0; i < keys.size(); ++i) {
    const redisReply* element = reply->element[i];
    if (element->type == REDIS_REPLY_STRING) values[i] = reply_text(element);
  }
  return values;
}

Status RedisStore::set_many(const std::vector<std::pair<std::string, std::string>>& entries) {
  if (entries.empty()) return ok_status();
  std::vector<std::string> args{"MSET"};
  args.reserve(2 * entries.size() + 1);
  for (const auto& [key, value] : entries) {
    args.push_back(prefix_ + key);
    args.push_back(value);
  }
  NTP_ASSIGN_OR_RETURN(ReplyPtr reply, command(args, "MSET " + entries.front().first + " ..."));
  if (reply->type == REDIS_REPLY_ERROR) {
    return internal_error("redis MSET " + entries.front().first +
                          " ... failed: " + reply_text(reply.get()));
  }
  return ok_status();
}

Status RedisStore::erase(const std::vector<std::string>& keys) {
  if (keys.empty()) return ok_status();
  std::vector<std::string> args{"UNLINK"};
  args.reserve(keys.size() + 1);
  for (const std::string& key : keys) args.push_back(prefix_ + key);
  NTP_ASSIGN_OR_RETURN(ReplyPtr reply, command(args, "UNLINK " + keys.front() + " ..."));
  if (reply->type == REDIS_REPLY_ERROR) {
    return internal_error("redis UNLINK " + keys.front() +
                          " ... failed: " + reply_text(reply.get()));
  }
  return ok_status();
}

Status RedisStore::append(const std::string& stream, const std::string& value) {
  NTP_ASSIGN_OR_RETURN(ReplyPtr reply,
                       command({"XADD", prefix_ + stream, "MAXLEN", "~", "10000", "*", "v", value},
                               "XADD " + stream));
  if (reply->type == REDIS_REPLY_ERROR) {
    return internal_error("redis XADD " + stream + " failed: " + reply_text(reply.get()));
  }
  return ok_status();
}

std::string RedisStore::describe() const { return description_; }

}  // namespace ntp::comm
