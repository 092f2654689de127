// RedisStore's stream reader: XREAD BLOCK on a connection of its own. wake() during a read shuts
// that socket down, which ends a blocked XREAD at once; the next read connects again. A wake
// between reads makes the next read return at once and leaves the connection as it is.
#include <hiredis/hiredis.h>
#include <sys/socket.h>

#include <atomic>
#include <mutex>
#include <utility>

#include "comm/redis_store.h"
#include "comm/redis_wire.h"
#include "comm/wait_observer.h"

namespace ntp::comm {

using redis_wire::reply_text;
using redis_wire::run_argv;
using redis_wire::SigpipeBlock;
using redis_wire::to_timeval;

namespace {

constexpr std::chrono::milliseconds kConnectTimeout{1000};

// Parses XREAD's reply, [[stream, [[id, [field, value, ...]], ...]], ...], into events and the
// cursors' new positions. False for a reply of another shape.
bool take_events(const redisReply* reply, const std::string& prefix,
                 std::vector<StreamCursor>& cursors, std::vector<StreamEvent>& events) {
  if (reply->type != REDIS_REPLY_ARRAY) return false;
  for (size_t s = 0; s < reply->elements; ++s) {
    const redisReply* stream = reply->element[s];
    if (stream->type != REDIS_REPLY_ARRAY || stream->elements != 2) return false;
    const std::string name = reply_text(stream->element[0]);
    size_t index = 0;
    while (index < cursors.size() && prefix + cursors[index].stream != name) ++index;
    if (index == cursors.size()) return false;
    const redisReply* entries = stream->element[1];
    for (size_t e = 0; e < entries->elements; ++e) {
      const redisReply* entry = entries->element[e];
      if (entry->type != REDIS_REPLY_ARRAY || entry->elements != 2) return false;
      const redisReply* fields = entry->element[1];
      cursors[index].position = reply_text(entry->element[0]);
      if (fields->type == REDIS_REPLY_ARRAY && fields->elements >= 2) {
        events.push_back({index, reply_text(fields->element[1])});
      }
    }
  }
  return true;
}

}  // namespace

class RedisStreamReader final : public StreamReader {
 public:
  RedisStreamReader(RedisStore::Endpoint endpoint, std::string prefix,
                    std::chrono::milliseconds io_timeout)
      : endpoint_(std::move(endpoint)), prefix_(std::move(prefix)), io_timeout_(io_timeout) {}
  ~RedisStreamReader() override { disconnect(); }

  Result<std::vector<StreamEvent>> read(std::vector<StreamCursor>& cursors,
                                        std::chrono::milliseconds block) override {
    SigpipeBlock no_sigpipe;
    const ScopedWait observed;  // as RedisStore::command: blocked on the store, not stuck
    if (woken_.exchange(false)) return std::vector<StreamEvent>();
    if (context_ == nullptr) NTP_RETURN_IF_ERROR(connect());
    const Reading reading(*this);  // from here a wake shuts the socket down
    if (woken_.exchange(false)) return std::vector<StreamEvent>();  // one before it may shut it
    std::vector<std::string> args{"XREAD"};
    if (block.count() > 0) args.insert(args.end(), {"BLOCK", std::to_string(block.count())});
    args.push_back("STREAMS");
    for (const StreamCursor& c : cursors) args.push_back(prefix_ + c.stream);
    for (const StreamCursor& c : cursors) args.push_back(c.position.empty() ? "0-0" : c.position);
    redisSetTimeout(context_, to_timeval(block + io_timeout_));
    std::unique_ptr<redisReply, void (*)(void*)> reply(
        static_cast<redisReply*>(run_argv(context_, args)), freeReplyObject);
    if (reply == nullptr) {  // woken (its socket shut down), or the connection broke
      disconnect();
      if (woken_.exchange(false)) return std::vector<StreamEvent>();
      return unavailable("redis store " + endpoint_.where + ": XREAD: connection lost");
    }
    std::vector<StreamEvent> events;
    if (reply->type == REDIS_REPLY_NIL) return events;
    if (reply->type == REDIS_REPLY_ERROR || !take_events(reply.get(), prefix_, cursors, events)) {
      return internal_error("redis XREAD failed: " + (reply->type == REDIS_REPLY_ERROR
                                                          ? reply_text(reply.get())
                                                          : std::string("unexpected reply")));
    }
    return events;
  }

  // The connection a first read would open: TCP, PING, INFO for the server's run id (three round
  // trips, and INFO's work in the server) done before any recovery needs the reader.
  Status prepare() override {
    if (context_ != nullptr) return ok_status();  // each re-formation asks: no syscall then
    SigpipeBlock no_sigpipe;
    return connect();
  }

  // Ends a read in progress by shutting its socket down; a wake while none is (between two reads)
  // only marks the next read to return at once, and the connection stays usable: a socket shut
  // while idle would fail the read after that one ("connection lost"), and a failure watch backs
  // off a poll period on a failed read, after every arm, which wakes its reader.
  void wake() override {
    woken_.store(true);
    std::lock_guard lock(fd_mutex_);
    if (reading_ && fd_ >= 0) {
      ::shutdown(fd_, SHUT_RDWR);
      shut_ = true;
    }
  }

 private:
  // Marks a read in progress (for wake()) while it lives: set before the read's last look at
  // woken_, so that a wake after that look finds it set and shuts the socket down. A socket shut
  // by a wake is closed when the read ends, even one whose XREAD had its answer first.
  class Reading {
   public:
    explicit Reading(RedisStreamReader& reader) : reader_(reader) { set(true); }
    ~Reading() {
      if (set(false)) reader_.disconnect();
    }
    Reading(const Reading&) = delete;
    Reading& operator=(const Reading&) = delete;

   private:
    // Returns whether a wake shut the socket down since the read began.
    bool set(bool on) {
      std::lock_guard lock(reader_.fd_mutex_);
      reader_.reading_ = on;
      return std::exchange(reader_.shut_, false);
    }
    RedisStreamReader& reader_;
  };

  Status connect() {
    std::string server_run_id;
    NTP_ASSIGN_OR_RETURN(
        redisContext * context,
        RedisStore::connect_once(endpoint_, kConnectTimeout, io_timeout_, &server_run_id));
    context_ = context;
    std::lock_guard lock(fd_mutex_);
    fd_ = context_->fd;
    return ok_status();
  }
  void disconnect() {
    if (context_ == nullptr) return;
    {
      std::lock_guard lock(fd_mutex_);  // wake() never shuts a closed (maybe reused) descriptor
      fd_ = -1;
    }
    redisFree(context_);
    context_ = nullptr;
  }

  const RedisStore::Endpoint endpoint_;
  const std::string prefix_;
  const std::chrono::milliseconds io_timeout_;
  redisContext* context_ = nullptr;  // the reading thread's only
  std::atomic<bool> woken_{false};
  std::mutex fd_mutex_;
  int fd_ = -1;
  bool reading_ = false;  // under fd_mutex_: a read is past its last look at woken_
  bool shut_ = false;     // under fd_mutex_: wake() shut the socket down during a read
};

std::unique_ptr<StreamReader> RedisStore::open_reader() {
  return std::make_unique<RedisStreamReader>(endpoint_, prefix_, io_timeout_);
}

}  // namespace ntp::comm
