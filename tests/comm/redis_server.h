// A real redis-server for tests, on a free loopback port, started and stopped by the test (and
// killed and restarted on the same port, to test riding out an outage).
#pragma once

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "core/non_copyable.h"
#include "dependency.h"
#include "local_server.h"

namespace ntp::comm::testing {

// A redis-server on a free loopback port, stopped by the destructor.
class RedisServer : NonCopyable {
 public:
  explicit RedisServer(const std::string& password = "") : password_(password) {
    port_ = ntp::testing::free_loopback_port();
    start();
  }
  ~RedisServer() { kill_now(); }

  // SIGKILLs the server and reaps it (no-op when it is not running). Without persistence
  // (--save "" --appendonly no) every key is gone.
  void kill_now() {
    if (pid_ <= 0) return;
    kill(pid_, SIGKILL);
    int status = 0;
    waitpid(pid_, &status, 0);
    pid_ = -1;
    ready_ = false;
  }
  // Starts a fresh server on the same port and password (after kill_now); true once it accepts
  // connections.
  bool start() {
    std::vector<std::string> args = {
        "redis-server", "--port", std::to_string(port_), "--bind", "127.0.0.1", "--save", "",
        "--appendonly", "no",     "--loglevel",          "warning"};
    if (!password_.empty()) args.insert(args.end(), {"--requirepass", password_});
    pid_ = fork();
    if (pid_ == 0) {
      ntp::testing::exec_silenced(std::move(args));
    }
    // Ready once it accepts connections.
    for (int i = 0; i < 500 && !ready_; ++i) {
      ready_ = ntp::testing::loopback_accepts(port_);
      if (!ready_) std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return ready_;
  }
  pid_t pid() const { return pid_; }
  bool ready() const { return ready_; }
  int port() const { return port_; }
  std::string spec(const std::string& password = "") const {
    return "redis://" + (password.empty() ? "" : ":" + password + "@") +
           "127.0.0.1:" + std::to_string(port_);
  }

  static bool available() { return std::system("redis-server --version >/dev/null 2>&1") == 0; }

 private:
  std::string password_;
  int port_ = 0;
  pid_t pid_ = -1;
  bool ready_ = false;
};

}  // namespace ntp::comm::testing

// In a test: skip (fail under CI=true) when no redis-server is installed
// (tests/common/dependency.h).
#define NTP_REQUIRE_REDIS()                                              \
  NTP_REQUIRE_DEPENDENCY(::ntp::comm::testing::RedisServer::available(), \
                         "redis-server (apt-get install redis-server)")
