// A real redis-server for tests, on a free loopback port, started and stopped by the test (and
// killed and restarted on the same port, to test riding out an outage).
#pragma once

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

namespace ntp::comm::testing {

// A redis-server on a free loopback port, stopped by the destructor.
class RedisServer {
 public:
  explicit RedisServer(const std::string& password = "") : password_(password) {
    port_ = free_port();
    start();
  }
  ~RedisServer() { kill_now(); }
  RedisServer(const RedisServer&) = delete;
  RedisServer& operator=(const RedisServer&) = delete;

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
      const int null = open("/dev/null", O_WRONLY);
      dup2(null, STDOUT_FILENO);
      dup2(null, STDERR_FILENO);
      std::vector<char*> argv;
      for (std::string& arg : args) argv.push_back(arg.data());
      argv.push_back(nullptr);
      execvp(argv[0], argv.data());
      _exit(127);
    }
    // Ready once it accepts connections.
    for (int i = 0; i < 500; ++i) {
      const int fd = socket(AF_INET, SOCK_STREAM, 0);
      sockaddr_in addr{};
      addr.sin_family = AF_INET;
      addr.sin_port = htons(static_cast<std::uint16_t>(port_));
      addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
      const bool up = connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0;
      close(fd);
      if (up) {
        ready_ = true;
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
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
  static int free_port() {
    const int fd = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
    socklen_t len = sizeof(addr);
    getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
    close(fd);
    return ntohs(addr.sin_port);
  }

  std::string password_;
  int port_ = 0;
  pid_t pid_ = -1;
  bool ready_ = false;
};

}  // namespace ntp::comm::testing
