#include "launch/worker_process.h"

#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <thread>

namespace ntp::launch {
namespace {

// In the forked child: becomes the worker. Never returns.
[[noreturn]] void exec_worker(pid_t parent, int out_fd, int err_fd, std::vector<char*>& argv,
                              std::vector<std::string>& env) {
  ::setpgid(0, 0);
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (::getppid() != parent) _exit(127);  // the launcher died before we got here
  struct sigaction dfl {};
  dfl.sa_handler = SIG_DFL;
  for (int signo : {SIGINT, SIGTERM, SIGPIPE}) ::sigaction(signo, &dfl, nullptr);
  sigset_t none;
  sigemptyset(&none);
  ::sigprocmask(SIG_SETMASK, &none, nullptr);
  ::dup2(out_fd, STDOUT_FILENO);
  ::dup2(err_fd, STDERR_FILENO);
  for (std::string& entry : env) ::putenv(entry.data());
  ::execvp(argv[0], argv.data());
  std::fprintf(stderr, "ntp launch: cannot run '%s': %s\n", argv[0], std::strerror(errno));
  _exit(127);
}

}  // namespace

std::string self_exe() {
  std::error_code ec;
  std::filesystem::path path = std::filesystem::read_symlink("/proc/self/exe", ec);
  return ec ? std::string("ntp") : path.string();
}

int cpus_for_workers() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (::sched_getaffinity(0, sizeof(set), &set) != 0) return 1;
  return std::max(1, CPU_COUNT(&set));
}

std::optional<SpawnedWorker> spawn_worker(std::vector<std::string> argv_text,
                                          std::vector<std::string> env, std::string* error) {
  int out[2];
  int err[2];
  if (::pipe2(out, O_CLOEXEC) != 0) {
    *error = std::string("cannot create pipes: ") + std::strerror(errno);
    return std::nullopt;
  }
  if (::pipe2(err, O_CLOEXEC) != 0) {
    *error = std::string("cannot create pipes: ") + std::strerror(errno);
    ::close(out[0]);
    ::close(out[1]);
    return std::nullopt;
  }
  std::vector<char*> argv;
  for (std::string& arg : argv_text) argv.push_back(arg.data());
  argv.push_back(nullptr);
  const pid_t parent = ::getpid();
  std::fflush(nullptr);
  const pid_t pid = ::fork();
  if (pid == 0) exec_worker(parent, out[1], err[1], argv, env);
  ::close(out[1]);
  ::close(err[1]);
  if (pid < 0) {
    *error = std::string("fork failed: ") + std::strerror(errno);
    ::close(out[0]);
    ::close(err[0]);
    return std::nullopt;
  }
  ::setpgid(pid, pid);  // also here, so killpg works even before the child ran
  ::fcntl(out[0], F_SETFL, O_NONBLOCK);
  ::fcntl(err[0], F_SETFL, O_NONBLOCK);
  return SpawnedWorker{pid, out[0], err[0]};
}

std::optional<int> exited_code(pid_t pid) {
  siginfo_t info{};
  if (::waitid(P_PID, static_cast<id_t>(pid), &info, WEXITED | WNOHANG | WNOWAIT) != 0 ||
      info.si_pid != pid) {
    return std::nullopt;
  }
  return info.si_code == CLD_EXITED ? info.si_status : 128 + info.si_status;
}

bool is_stopped(pid_t pid) {
  siginfo_t info{};
  // WNOWAIT: the stop stays reported while it lasts (and no longer once the process continues).
  return ::waitid(P_PID, static_cast<id_t>(pid), &info, WSTOPPED | WNOHANG | WNOWAIT) == 0 &&
         info.si_pid == pid && info.si_code == CLD_STOPPED;
}

void reap_worker(pid_t pid) {
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  // Its group may still hold children: they go with it (no orphans).
  ::killpg(pid, SIGKILL);
}

void ProcessGroups::reap() {
  for (auto it = groups_.begin(); it != groups_.end();) {
    int status = 0;
    while (::waitpid(-*it, &status, WNOHANG) > 0) {
    }
    // kill(pid, 0) succeeds on a zombie, so a group is only gone once its last member is reaped.
    if (::killpg(*it, 0) != 0 && errno == ESRCH) {
      it = groups_.erase(it);
    } else {
      ::killpg(*it, SIGKILL);  // a member forked after the first SIGKILL
      ++it;
    }
  }
}

std::vector<pid_t> ProcessGroups::wait_all(std::chrono::milliseconds bound) {
  const auto deadline = std::chrono::steady_clock::now() + bound;
  reap();
  while (!groups_.empty() && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
    reap();
  }
  return groups_;
}

}  // namespace ntp::launch
