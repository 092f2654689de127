#include "comm/file_store.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

namespace ntp::comm {
namespace {

constexpr auto kLockTimeout = std::chrono::seconds(10);

// Keys may contain '/', ':' and other characters; file names get only [A-Za-z0-9._-], the rest
// as %XX, so the mapping is injective.
std::string escape_key(const std::string& key) {
  static constexpr char kHex[] = "0123456789ABCDEF";
  std::string out;
  out.reserve(key.size());
  for (unsigned char c : key) {
    if (std::isalnum(c) != 0 || c == '.' || c == '_' || c == '-') {
      out.push_back(static_cast<char>(c));
    } else {
      out.push_back('%');
      out.push_back(kHex[c >> 4]);
      out.push_back(kHex[c & 15]);
    }
  }
  if (out.empty() || out[0] == '.') out.insert(0, "%");  // never "", ".", ".."
  return out;
}

// Writes `value` to a new file beside `path` (named for this process and call) and returns its
// name; the caller renames or links it into place.
Result<std::string> write_temporary(const std::string& path, const std::string& value) {
  static std::atomic<std::uint64_t> counter{0};
  const std::string tmp =
      path + ".tmp." + std::to_string(::getpid()) + "." + std::to_string(counter.fetch_add(1));
  std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
  out.write(value.data(), static_cast<std::streamsize>(value.size()));
  out.flush();
  if (!out) return unavailable("file store: cannot write " + tmp + ": " + std::strerror(errno));
  return tmp;
}

Status write_atomically(const std::string& path, const std::string& value) {
  NTP_ASSIGN_OR_RETURN(const std::string tmp, write_temporary(path, value));
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    const std::string error = std::strerror(errno);
    std::remove(tmp.c_str());
    return unavailable("file store: cannot rename " + tmp + ": " + error);
  }
  return ok_status();
}

}  // namespace

Result<std::shared_ptr<FileStore>> FileStore::open(const std::string& dir,
                                                   const std::string& run_id) {
  if (dir.empty()) return invalid_argument("file store: empty directory (use file:DIR)");
  const std::string root = dir + "/" + escape_key(run_id);
  std::error_code ec;
  std::filesystem::create_directories(root, ec);
  if (ec) return unavailable("file store: cannot create " + root + ": " + ec.message());
  return std::shared_ptr<FileStore>(new FileStore(root, "file:" + dir + " run=" + run_id));
}

std::string FileStore::path_of(const std::string& key) const {
  return root_ + "/" + escape_key(key);
}

Status FileStore::set(const std::string& key, const std::string& value) {
  return write_atomically(path_of(key), value);
}

Result<std::string> FileStore::get(const std::string& key) {
  std::ifstream in(path_of(key), std::ios::binary);
  if (!in) return not_found("file store: no key '" + key + "'");
  std::ostringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

Status FileStore::erase(const std::vector<std::string>& keys) {
  for (const std::string& key : keys) {
    if (::unlink(path_of(key).c_str()) != 0 && errno != ENOENT) {
      return unavailable("file store: cannot remove key '" + key + "': " + std::strerror(errno));
    }
  }
  return ok_status();
}

Result<bool> FileStore::exists(const std::string& key) {
  struct stat st;
  return ::stat(path_of(key).c_str(), &st) == 0;
}

Result<bool> FileStore::claim(const std::string& key, const std::string& value) {
  const std::string path = path_of(key);
  NTP_ASSIGN_OR_RETURN(const std::string tmp, write_temporary(path, value));
  const int linked = ::link(tmp.c_str(), path.c_str());
  const int error = errno;
  std::remove(tmp.c_str());
  if (linked == 0) return true;
  if (error != EEXIST) {
    return unavailable("file store: cannot link " + path + ": " + std::strerror(error));
  }
  Result<std::string> held = get(key);
  if (!held.ok()) {  // erased since (collected): held by another
    if (held.status().code() == StatusCode::kNotFound) return false;
    return held.status();
  }
  return *held == value;
}

Result<std::int64_t> FileStore::add(const std::string& key, std::int64_t delta) {
  const std::string lock_path = path_of(key) + ".lock";
  const int fd = ::open(lock_path.c_str(), O_CREAT | O_RDWR | O_CLOEXEC, 0644);
  if (fd < 0)
    return unavailable("file store: cannot open " + lock_path + ": " + std::strerror(errno));
  // Poll instead of blocking: a holder that is SIGSTOPped must not hang everyone else.
  const auto deadline = std::chrono::steady_clock::now() + kLockTimeout;
  while (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    if (errno != EWOULDBLOCK || std::chrono::steady_clock::now() >= deadline) {
      ::close(fd);
      return unavailable("file store: cannot lock " + lock_path +
                         " (its holder may be hung or dead)");
    }
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
  std::int64_t value = 0;
  Result<std::string> old = get(key);
  if (old.ok()) {
    try {
      value = std::stoll(*old);
    } catch (const std::exception&) {
      ::close(fd);
      return failed_precondition("file store: key '" + key + "' does not hold an integer");
    }
  }
  value += delta;
  Status status = set(key, std::to_string(value));
  ::close(fd);  // releases the lock
  NTP_RETURN_IF_ERROR(status);
  return value;
}

std::string FileStore::describe() const { return description_; }

}  // namespace ntp::comm
