#include "checkpoint/atomic_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <utility>

namespace ntp::checkpoint {
namespace {

constexpr std::string_view kTempPrefix = ".tmp.";

std::atomic<uint64_t> temp_counter{0};

}  // namespace

Status errno_status(std::string_view what, const std::filesystem::path& path) {
  return internal_error(std::string(what) + " " + path.string() + ": " + std::strerror(errno));
}

bool is_temporary_name(std::string_view file_name) { return file_name.starts_with(kTempPrefix); }

Result<AtomicFile> AtomicFile::create(const std::filesystem::path& final_path) {
  std::filesystem::path dir = final_path.parent_path();
  if (dir.empty()) dir = ".";
  const std::string temp_name = std::string(kTempPrefix) + final_path.filename().string() + "." +
                                std::to_string(::getpid()) + "." +
                                std::to_string(temp_counter.fetch_add(1));
  std::filesystem::path temp_path = dir / temp_name;
  const int fd = ::open(temp_path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) return errno_status("cannot create", temp_path);
  return AtomicFile(final_path, std::move(temp_path), fd);
}

AtomicFile::AtomicFile(std::filesystem::path final_path, std::filesystem::path temp_path, int fd)
    : final_path_(std::move(final_path)), temp_path_(std::move(temp_path)), fd_(fd) {}

AtomicFile::AtomicFile(AtomicFile&& other) noexcept
    : final_path_(std::move(other.final_path_)),
      temp_path_(std::move(other.temp_path_)),
      fd_(std::exchange(other.fd_, -1)) {}

AtomicFile& AtomicFile::operator=(AtomicFile&& other) noexcept {
  if (this != &other) {
    discard();
    final_path_ = std::move(other.final_path_);
    temp_path_ = std::move(other.temp_path_);
    fd_ = std::exchange(other.fd_, -1);
  }
  return *this;
}

AtomicFile::~AtomicFile() { discard(); }

void AtomicFile::discard() {
  if (fd_ < 0) return;
  ::close(fd_);
  ::unlink(temp_path_.c_str());
  fd_ = -1;
}

Status AtomicFile::write(std::span<const std::byte> data) {
  if (fd_ < 0)
    return failed_precondition("write to a committed AtomicFile " + final_path_.string());
  const auto* p = reinterpret_cast<const char*>(data.data());
  size_t left = data.size();
  while (left > 0) {
    const ssize_t n = ::write(fd_, p, left);
    if (n < 0) {
      if (errno == EINTR) continue;
      return errno_status("cannot write", temp_path_);
    }
    p += n;
    left -= static_cast<size_t>(n);
  }
  return ok_status();
}

Status AtomicFile::write(std::string_view text) {
  return write(std::as_bytes(std::span<const char>(text.data(), text.size())));
}

Status AtomicFile::commit(bool sync_directory) {
  if (fd_ < 0) return failed_precondition("commit of a spent AtomicFile " + final_path_.string());
  if (::fsync(fd_) != 0) {
    Status s = errno_status("cannot fsync", temp_path_);
    discard();
    return s;
  }
  if (::close(std::exchange(fd_, -1)) != 0) {
    Status s = errno_status("cannot close", temp_path_);
    ::unlink(temp_path_.c_str());
    return s;
  }
  if (::rename(temp_path_.c_str(), final_path_.c_str()) != 0) {
    Status s = errno_status("cannot rename to " + final_path_.string() + " from", temp_path_);
    ::unlink(temp_path_.c_str());
    return s;
  }
  if (!sync_directory) return ok_status();
  std::filesystem::path dir = final_path_.parent_path();
  return fsync_directory(dir.empty() ? std::filesystem::path(".") : dir);
}

Status write_file_atomically(const std::filesystem::path& path, std::string_view content) {
  NTP_ASSIGN_OR_RETURN(AtomicFile file, AtomicFile::create(path));
  NTP_RETURN_IF_ERROR(file.write(content));
  return file.commit();
}

Status fsync_directory(const std::filesystem::path& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return errno_status("cannot open directory", dir);
  const int rc = ::fsync(fd);
  Status s = rc == 0 ? ok_status() : errno_status("cannot fsync directory", dir);
  ::close(fd);
  return s;
}

}  // namespace ntp::checkpoint
