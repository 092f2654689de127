#include "launch/output_relay.h"

#include <poll.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <filesystem>
#include <thread>

namespace ntp::launch {

void OutputRelay::attach(Slot& slot, int out_fd, int err_fd) {
  slot.out = Stream{out_fd, {}};
  slot.err = Stream{err_fd, {}};
  if (log_dir_.empty()) return;
  std::error_code ec;
  std::filesystem::create_directories(log_dir_, ec);
  slot.log = std::make_unique<std::ofstream>(
      log_dir_ + "/rank_" + std::to_string(slot.id.rank) + ".log", std::ios::app);
  *slot.log << "=== ntp launch: rank " << slot.id.rank << " pid " << slot.pid << " restart "
            << slot.id.restart_count << " attempt " << slot.id.attempt << " ===\n";
  slot.log->flush();
}

void OutputRelay::emit(Slot& slot, bool is_err, const std::string& line) {
  std::FILE* to = is_err ? stderr : stdout;
  if (prefix_) {
    std::fprintf(to, "[rank %d] %s\n", slot.id.rank, line.c_str());
  } else {
    std::fprintf(to, "%s\n", line.c_str());
  }
  std::fflush(to);
  if (slot.log) {
    *slot.log << line << '\n';
    slot.log->flush();
  }
}

bool OutputRelay::read_stream(Slot& slot, Stream& stream, bool is_err) {
  char buffer[4096];
  for (;;) {
    const ssize_t got = ::read(stream.fd, buffer, sizeof(buffer));
    if (got > 0) {
      stream.partial.append(buffer, static_cast<std::size_t>(got));
      std::size_t pos;
      while ((pos = stream.partial.find('\n')) != std::string::npos) {
        emit(slot, is_err, stream.partial.substr(0, pos));
        stream.partial.erase(0, pos + 1);
      }
      continue;
    }
    if (got < 0 && (errno == EAGAIN || errno == EINTR)) return true;
    if (!stream.partial.empty()) emit(slot, is_err, stream.partial);
    stream.partial.clear();
    ::close(stream.fd);
    stream.fd = -1;
    return false;
  }
}

void OutputRelay::pump(std::vector<Slot>& slots, std::chrono::milliseconds wait) {
  std::vector<pollfd> fds;
  std::vector<std::pair<Slot*, bool>> owners;
  for (Slot& slot : slots) {
    if (slot.out.fd >= 0) {
      fds.push_back(pollfd{slot.out.fd, POLLIN, 0});
      owners.emplace_back(&slot, false);
    }
    if (slot.err.fd >= 0) {
      fds.push_back(pollfd{slot.err.fd, POLLIN, 0});
      owners.emplace_back(&slot, true);
    }
  }
  if (fds.empty()) {
    std::this_thread::sleep_for(wait);
    return;
  }
  const int ready = ::poll(fds.data(), fds.size(), static_cast<int>(wait.count()));
  if (ready <= 0) return;
  for (std::size_t i = 0; i < fds.size(); ++i) {
    if (fds[i].revents == 0) continue;
    auto [slot, is_err] = owners[i];
    read_stream(*slot, is_err ? slot->err : slot->out, is_err);
  }
}

void OutputRelay::drain(Slot& slot) {
  for (bool is_err : {false, true}) {
    Stream& stream = is_err ? slot.err : slot.out;
    if (stream.fd < 0) continue;
    if (read_stream(slot, stream, is_err)) {
      if (!stream.partial.empty()) emit(slot, is_err, stream.partial);
      stream.partial.clear();
      ::close(stream.fd);
      stream.fd = -1;
    }
  }
}

}  // namespace ntp::launch
