#include "child_process.h"

#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>

namespace ntp::testing {

ChildProcess start_child(const std::vector<std::string>& argv,
                         const std::vector<std::string>& env) {
  int out_pipe[2], err_pipe[2];
  if (pipe(out_pipe) != 0 || pipe(err_pipe) != 0) std::abort();
  std::vector<std::string> argv_storage = argv;
  std::vector<std::string> env_storage = env;
  const pid_t pid = fork();
  if (pid < 0) std::abort();
  if (pid == 0) {
    dup2(out_pipe[1], STDOUT_FILENO);
    dup2(err_pipe[1], STDERR_FILENO);
    close(out_pipe[0]);
    close(err_pipe[0]);
    for (std::string& entry : env_storage) putenv(entry.data());
    std::vector<char*> args;
    for (std::string& a : argv_storage) args.push_back(a.data());
    args.push_back(nullptr);
    execv(args[0], args.data());
    _exit(127);
  }
  close(out_pipe[1]);
  close(err_pipe[1]);
  return {pid, out_pipe[0], err_pipe[0]};
}

CommandOutput finish_child(const ChildProcess& child, std::chrono::milliseconds limit) {
  CommandOutput result;
  const auto deadline = std::chrono::steady_clock::now() + limit;
  pollfd fds[2] = {{child.out_fd, POLLIN, 0}, {child.err_fd, POLLIN, 0}};
  std::string* sinks[2] = {&result.out, &result.err};
  int open_fds = 2;
  char buffer[65536];
  while (open_fds > 0) {
    if (std::chrono::steady_clock::now() > deadline) {
      result.timed_out = true;
      kill(child.pid, SIGKILL);
      for (pollfd& p : fds) {
        if (p.fd >= 0) close(p.fd);
      }
      break;
    }
    if (poll(fds, 2, 100) <= 0) continue;
    for (int i = 0; i < 2; ++i) {
      if (fds[i].fd < 0 || fds[i].revents == 0) continue;
      const ssize_t n = read(fds[i].fd, buffer, sizeof(buffer));
      if (n > 0) {
        sinks[i]->append(buffer, static_cast<std::size_t>(n));
      } else {
        close(fds[i].fd);
        fds[i].fd = -1;
        --open_fds;
      }
    }
  }
  int status = 0;
  waitpid(child.pid, &status, 0);
  result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return result;
}

CommandOutput run_command(const std::vector<std::string>& argv, const std::vector<std::string>& env,
                          std::chrono::milliseconds limit) {
  return finish_child(start_child(argv, env), limit);
}

}  // namespace ntp::testing
