// What the tests' and benches' own servers (a redis-server on a free loopback port) need: a free
// port, a readiness probe, and the exec of the server with its output silenced.
#pragma once

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdint>
#include <string>
#include <vector>

namespace ntp::testing {

inline sockaddr_in loopback_address(int port) {
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<std::uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  return addr;
}

// A port on 127.0.0.1 that was free a moment ago (the kernel's pick for port 0). Another process
// may take it before the caller binds it; servers started on it report a failed start.
inline int free_loopback_port() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr = loopback_address(0);
  bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
  socklen_t len = sizeof(addr);
  getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  close(fd);
  return ntohs(addr.sin_port);
}

// True when something accepts TCP connections on 127.0.0.1:`port`.
inline bool loopback_accepts(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  const sockaddr_in addr = loopback_address(port);
  const bool up = connect(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof(addr)) == 0;
  close(fd);
  return up;
}

// In a forked child: stdout and stderr to /dev/null, then exec `args` (argv[0] looked up in
// PATH); exit code 127 when the exec fails.
[[noreturn]] inline void exec_silenced(std::vector<std::string> args) {
  const int null = open("/dev/null", O_WRONLY);
  dup2(null, STDOUT_FILENO);
  dup2(null, STDERR_FILENO);
  std::vector<char*> argv;
  for (std::string& arg : args) argv.push_back(arg.data());
  argv.push_back(nullptr);
  execvp(argv[0], argv.data());
  _exit(127);
}

}  // namespace ntp::testing
