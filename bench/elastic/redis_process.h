// The control-plane bench's own redis-server: started on a loopback port, stopped by the
// destructor, and its load read from the server's own counters (INFO), not from the clients.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <memory>
#include <string>

#include "core/non_copyable.h"
#include "core/status.h"

namespace ntp::bench {

// What the server has done since it started (INFO commandstats and INFO stats).
struct ServerCounts {
  std::int64_t commands = 0;   // calls of every command but INFO (the bench's own sampling)
  std::int64_t bytes_in = 0;   // total_net_input_bytes: requests, INFO included
  std::int64_t bytes_out = 0;  // total_net_output_bytes: replies, INFO replies included
};

class RedisProcess : NonCopyable {
 public:
  // Starts `binary` on 127.0.0.1:`port` (0: a free port) without persistence; kUnavailable when
  // it does not accept connections within 5 s.
  static Result<std::unique_ptr<RedisProcess>> start(const std::string& binary, int port);
  ~RedisProcess();  // SIGKILL and reap

  int port() const { return port_; }
  std::string spec() const { return "redis://127.0.0.1:" + std::to_string(port_); }
  // One INFO round trip on a connection of its own.
  Result<ServerCounts> counts() const;

 private:
  RedisProcess(pid_t pid, int port) : pid_(pid), port_(port) {}
  pid_t pid_;
  int port_;
};

}  // namespace ntp::bench
