#include "comm/redis_wire.h"

#include <hiredis/hiredis.h>
#include <pthread.h>

#include <cerrno>

namespace ntp::comm::redis_wire {

timeval to_timeval(std::chrono::milliseconds ms) {
  return timeval{static_cast<time_t>(ms.count() / 1000),
                 static_cast<suseconds_t>((ms.count() % 1000) * 1000)};
}

SigpipeBlock::SigpipeBlock() {
  sigemptyset(&pipe_);
  sigaddset(&pipe_, SIGPIPE);
  sigset_t pending;
  sigpending(&pending);
  was_pending_ = sigismember(&pending, SIGPIPE) == 1;
  pthread_sigmask(SIG_BLOCK, &pipe_, &old_);
}

SigpipeBlock::~SigpipeBlock() {
  if (!was_pending_) {
    sigset_t pending;
    sigpending(&pending);
    if (sigismember(&pending, SIGPIPE) == 1) {
      const timespec zero{0, 0};
      while (sigtimedwait(&pipe_, nullptr, &zero) == -1 && errno == EINTR) {
      }
    }
  }
  pthread_sigmask(SIG_SETMASK, &old_, nullptr);
}

std::string reply_text(const redisReply* reply) { return std::string(reply->str, reply->len); }

bool transient_error(const redisReply* reply) {
  if (reply->type != REDIS_REPLY_ERROR) return false;
  const std::string text = reply_text(reply);
  for (const char* prefix : {"LOADING", "BUSY", "TRYAGAIN", "MASTERDOWN"}) {
    if (text.rfind(prefix, 0) == 0) return true;
  }
  return false;
}

std::string context_error(const redisContext* context) {
  return context->errstr[0] != '\0' ? context->errstr : "connection lost";
}

redisReply* run_argv(redisContext* context, const std::vector<std::string>& args) {
  std::vector<const char*> argv;
  std::vector<size_t> lengths;
  for (const std::string& a : args) {
    argv.push_back(a.data());
    lengths.push_back(a.size());
  }
  return static_cast<redisReply*>(
      redisCommandArgv(context, static_cast<int>(args.size()), argv.data(), lengths.data()));
}

}  // namespace ntp::comm::redis_wire
