// The hiredis plumbing shared by RedisStore and its stream reader: argv commands, reply text,
// which errors pass by themselves, and the SIGPIPE guard every write needs.
#pragma once

#include <signal.h>
#include <sys/time.h>

#include <chrono>
#include <string>
#include <vector>

#include "core/non_copyable.h"

struct redisContext;
struct redisReply;

namespace ntp::comm::redis_wire {

timeval to_timeval(std::chrono::milliseconds ms);

// hiredis 0.14 writes with write(2): a command sent on a connection the server has reset raises
// SIGPIPE, whose default action would kill the process. Blocks SIGPIPE in this thread for the
// guard's life and discards one raised meanwhile (the write then fails with EPIPE instead).
class SigpipeBlock : NonCopyable {
 public:
  SigpipeBlock();
  ~SigpipeBlock();

 private:
  sigset_t pipe_;
  sigset_t old_;
  bool was_pending_ = false;
};

std::string reply_text(const redisReply* reply);
// Error replies that go away by themselves: a server still loading its data set after a restart,
// one busy with a long script, a replica without its master.
bool transient_error(const redisReply* reply);
std::string context_error(const redisContext* context);
// One command in argv form (binary-safe); null when the connection broke.
redisReply* run_argv(redisContext* context, const std::vector<std::string>& args);

}  // namespace ntp::comm::redis_wire
