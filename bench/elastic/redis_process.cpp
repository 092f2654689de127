#include "redis_process.h"

#include <hiredis/hiredis.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <memory>
#include <sstream>
#include <thread>
#include <vector>

#include "local_server.h"

namespace ntp::bench {
namespace {

// The integer after "<field>:" in an INFO reply, 0 when absent.
std::int64_t field(const std::string& text, const std::string& name) {
  const size_t at = text.find(name + ":");
  if (at == std::string::npos) return 0;
  return std::strtoll(text.c_str() + at + name.size() + 1, nullptr, 10);
}

}  // namespace

Result<std::unique_ptr<RedisProcess>> RedisProcess::start(const std::string& binary, int port) {
  if (port == 0) port = testing::free_loopback_port();
  std::vector<std::string> args = {
      binary,         "--port", std::to_string(port), "--bind",  "127.0.0.1",    "--save", "",
      "--appendonly", "no",     "--loglevel",         "warning", "--maxclients", "16000"};
  const pid_t pid = fork();
  if (pid == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);  // never outlives the bench
    // The store as on a host of its own: ahead of the members for the CPU (they share this
    // machine's cores with it; a cluster's store does not share its host with 4,096 workers).
    // Without the privilege to raise it the server runs at the members' priority.
    (void)setpriority(PRIO_PROCESS, 0, -10);
    ntp::testing::exec_silenced(std::move(args));
  }
  if (pid < 0) return unavailable("cannot fork for " + binary);
  auto server = std::unique_ptr<RedisProcess>(new RedisProcess(pid, port));
  for (int i = 0; i < 500; ++i) {
    if (testing::loopback_accepts(port)) return server;
    int status = 0;
    if (waitpid(pid, &status, WNOHANG) == pid) {
      server->pid_ = -1;
      return unavailable(binary + " exited at start (port " + std::to_string(port) +
                         " in use, or not a redis-server?)");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return unavailable(binary + " did not accept connections on port " + std::to_string(port) +
                     " within 5 s");
}

RedisProcess::~RedisProcess() {
  if (pid_ <= 0) return;
  kill(pid_, SIGKILL);
  int status = 0;
  waitpid(pid_, &status, 0);
}

Result<ServerCounts> RedisProcess::counts() const {
  const timeval timeout{10, 0};
  std::unique_ptr<redisContext, void (*)(redisContext*)> c(
      redisConnectWithTimeout("127.0.0.1", port_, timeout), redisFree);
  if (c == nullptr || c->err != 0) return unavailable("cannot reach the bench's redis-server");
  redisSetTimeout(c.get(), timeval{60, 0});  // a saturated server answers late
  auto info = [&](const char* section) -> Result<std::string> {
    auto* reply = static_cast<redisReply*>(redisCommand(c.get(), "INFO %s", section));
    if (reply == nullptr) return unavailable("INFO " + std::string(section) + " got no reply");
    std::string text =
        reply->type == REDIS_REPLY_STRING ? std::string(reply->str, reply->len) : std::string();
    freeReplyObject(reply);
    return text;
  };
  NTP_ASSIGN_OR_RETURN(std::string commandstats, info("commandstats"));
  NTP_ASSIGN_OR_RETURN(std::string stats, info("stats"));
  ServerCounts out;
  // Lines "cmdstat_<name>:calls=<n>,usec=...".
  std::istringstream lines(commandstats);
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind("cmdstat_", 0) != 0 || line.rfind("cmdstat_info:", 0) == 0) continue;
    const size_t at = line.find("calls=");
    if (at != std::string::npos) out.commands += std::strtoll(line.c_str() + at + 6, nullptr, 10);
  }
  out.bytes_in = field(stats, "total_net_input_bytes");
  out.bytes_out = field(stats, "total_net_output_bytes");
  return out;
}

}  // namespace ntp::bench
