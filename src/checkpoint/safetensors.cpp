#include "checkpoint/safetensors.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <nlohmann/json.hpp>
#include <numeric>
#include <utility>

namespace ntp::checkpoint {
namespace {

using nlohmann::json;

constexpr std::string_view kMetadataKey = "__metadata__";
constexpr uint64_t kMaxDim = uint64_t{1} << 62;

Status header_error(const std::string& what) {
  return invalid_argument("safetensors header: " + what);
}

uint64_t read_le64(const char* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | static_cast<unsigned char>(p[i]);
  return v;
}

void write_le64(uint64_t v, char* p) {
  for (int i = 0; i < 8; ++i) p[i] = static_cast<char>((v >> (8 * i)) & 0xFFu);
}

// Validates one tensor entry of the header JSON.
Result<SafetensorsEntry> parse_entry(const std::string& name, const json& e, uint64_t data_size) {
  const std::string where = "tensor '" + name + "': ";
  if (!e.is_object()) return header_error(where + "entry is not an object");
  if (e.size() != 3 || !e.contains("dtype") || !e.contains("shape") ||
      !e.contains("data_offsets")) {
    return header_error(where + "needs exactly dtype, shape and data_offsets");
  }
  SafetensorsEntry entry;
  entry.name = name;
  if (!e["dtype"].is_string()) return header_error(where + "dtype is not a string");
  entry.dtype = e["dtype"].get<std::string>();
  const int size = dtype_size(entry.dtype);
  if (size == 0) return header_error(where + "unknown dtype '" + entry.dtype + "'");
  if (!e["shape"].is_array()) return header_error(where + "shape is not an array");
  uint64_t bytes = static_cast<uint64_t>(size);
  for (const json& d : e["shape"]) {
    if (!d.is_number_unsigned() || d.get<uint64_t>() > kMaxDim) {
      return header_error(where + "shape has a dimension that is not a non-negative integer");
    }
    const uint64_t dim = d.get<uint64_t>();
    if (__builtin_mul_overflow(bytes, dim, &bytes)) return header_error(where + "shape too large");
    entry.shape.push_back(static_cast<int64_t>(dim));
  }
  const json& off = e["data_offsets"];
  if (!off.is_array() || off.size() != 2 || !off[0].is_number_unsigned() ||
      !off[1].is_number_unsigned()) {
    return header_error(where + "data_offsets is not [begin, end]");
  }
  entry.begin = off[0].get<uint64_t>();
  entry.end = off[1].get<uint64_t>();
  if (entry.begin > entry.end || entry.end > data_size) {
    return header_error(where + "data_offsets [" + std::to_string(entry.begin) + ", " +
                        std::to_string(entry.end) + ") outside the data section of " +
                        std::to_string(data_size) + " bytes");
  }
  if (entry.end - entry.begin != bytes) {
    return header_error(where + "data_offsets span " + std::to_string(entry.end - entry.begin) +
                        " bytes but shape and dtype need " + std::to_string(bytes));
  }
  return entry;
}

}  // namespace

int dtype_size(std::string_view dtype) {
  static constexpr std::pair<std::string_view, int> kSizes[] = {
      {"F64", 8}, {"F32", 4}, {"F16", 2},  {"BF16", 2},    {"I64", 8},
      {"I32", 4}, {"I16", 2}, {"I8", 1},   {"U64", 8},     {"U32", 4},
      {"U16", 2}, {"U8", 1},  {"BOOL", 1}, {"F8_E4M3", 1}, {"F8_E5M2", 1}};
  for (const auto& [name, size] : kSizes) {
    if (name == dtype) return size;
  }
  return 0;
}

const SafetensorsEntry* SafetensorsHeader::find(std::string_view name) const {
  if (by_name.size() != entries.size()) {
    for (const SafetensorsEntry& e : entries) {
      if (e.name == name) return &e;
    }
    return nullptr;
  }
  auto it = std::lower_bound(by_name.begin(), by_name.end(), name,
                             [&](uint32_t i, std::string_view n) { return entries[i].name < n; });
  return it != by_name.end() && entries[*it].name == name ? &entries[*it] : nullptr;
}

Result<SafetensorsHeader> parse_safetensors_header(std::string_view prefix, uint64_t file_size) {
  if (file_size < 8 || prefix.size() < 8) {
    return header_error("file of " + std::to_string(file_size) +
                        " bytes is too short for the 8-byte length");
  }
  SafetensorsHeader header;
  header.header_bytes = read_le64(prefix.data());
  if (header.header_bytes > kMaxSafetensorsHeaderBytes || header.header_bytes > file_size - 8) {
    return header_error("length " + std::to_string(header.header_bytes) + " exceeds the file (" +
                        std::to_string(file_size) + " bytes) or the 100 MiB limit");
  }
  if (prefix.size() < header.data_start()) return header_error("truncated");
  const std::string_view text = prefix.substr(8, header.header_bytes);
  if (text.empty() || text.front() != '{') return header_error("does not start with '{'");
  const json doc = json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded() || !doc.is_object()) return header_error("is not a JSON object");
  const uint64_t data_size = file_size - header.data_start();
  for (const auto& [key, value] : doc.items()) {
    if (key == kMetadataKey) {
      if (!value.is_object()) return header_error("__metadata__ is not an object");
      for (const auto& [mk, mv] : value.items()) {
        if (!mv.is_string()) return header_error("__metadata__ '" + mk + "' is not a string");
        header.metadata[mk] = mv.get<std::string>();
      }
      continue;
    }
    NTP_ASSIGN_OR_RETURN(SafetensorsEntry entry, parse_entry(key, value, data_size));
    header.entries.push_back(std::move(entry));
  }
  std::sort(header.entries.begin(), header.entries.end(),
            [](const SafetensorsEntry& a, const SafetensorsEntry& b) {
              return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
            });
  uint64_t expected = 0;
  for (const SafetensorsEntry& e : header.entries) {
    if (e.begin != expected) {
      return header_error("tensor '" + e.name + "' starts at " + std::to_string(e.begin) +
                          ", expected " + std::to_string(expected) + " (overlap or hole)");
    }
    expected = e.end;
  }
  if (expected != data_size) {
    return header_error("tensors cover " + std::to_string(expected) +
                        " bytes but the data section has " + std::to_string(data_size));
  }
  header.by_name.resize(header.entries.size());
  std::iota(header.by_name.begin(), header.by_name.end(), uint32_t{0});
  std::sort(header.by_name.begin(), header.by_name.end(), [&](uint32_t a, uint32_t b) {
    return header.entries[a].name < header.entries[b].name;
  });
  return header;
}

Result<SafetensorsWriter> SafetensorsWriter::create(
    const std::filesystem::path& path, const std::vector<SafetensorsTensor>& tensors,
    const std::map<std::string, std::string>& metadata) {
  json doc = json::object();
  uint64_t offset = 0;
  for (const SafetensorsTensor& t : tensors) {
    if (t.name.empty() || t.name == kMetadataKey || doc.contains(t.name)) {
      return invalid_argument("safetensors tensor name '" + t.name +
                              "' is empty, reserved or repeated");
    }
    uint64_t bytes = 4;
    for (int64_t d : t.shape) {
      if (d < 0) return invalid_argument("safetensors tensor '" + t.name + "' has a negative dim");
      bytes *= static_cast<uint64_t>(d);
    }
    doc[t.name] = {
        {"dtype", "F32"}, {"shape", t.shape}, {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
  }
  if (!metadata.empty()) doc[std::string(kMetadataKey)] = metadata;
  std::string text = doc.dump();
  text.append((8 - text.size() % 8) % 8, ' ');
  std::string prefix(8, '\0');
  write_le64(text.size(), prefix.data());
  NTP_ASSIGN_OR_RETURN(AtomicFile file, AtomicFile::create(path));
  NTP_RETURN_IF_ERROR(file.write(prefix));
  NTP_RETURN_IF_ERROR(file.write(text));
  return SafetensorsWriter(std::move(file), 8 + text.size(), offset);
}

Status SafetensorsWriter::write(std::span<const std::byte> data) {
  if (written_ + data.size() > data_bytes_) {
    return failed_precondition("safetensors writer: more data than declared for " +
                               file_.final_path().string());
  }
  NTP_RETURN_IF_ERROR(file_.write(data));
  written_ += data.size();
  return ok_status();
}

Status SafetensorsWriter::commit(bool sync_directory) {
  if (written_ != data_bytes_) {
    return failed_precondition("safetensors writer: " + std::to_string(written_) + " of " +
                               std::to_string(data_bytes_) + " bytes written to " +
                               file_.final_path().string());
  }
  return file_.commit(sync_directory);
}

Result<SafetensorsFile> SafetensorsFile::open(const std::filesystem::path& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT) return not_found(path.string() + ": no such file");
    return errno_status("cannot open", path);
  }
  SafetensorsFile file(path, fd, {});
  struct stat st {};
  if (::fstat(fd, &st) != 0) return errno_status("cannot stat", path);
  file.file_size_ = static_cast<uint64_t>(st.st_size);
  std::string prefix(8, '\0');
  if (file.file_size_ >= 8) {
    if (::pread(fd, prefix.data(), 8, 0) != 8) return errno_status("cannot read", path);
    const uint64_t n = read_le64(prefix.data());
    if (n <= kMaxSafetensorsHeaderBytes && n <= file.file_size_ - 8) {
      prefix.resize(8 + n);
      if (::pread(fd, prefix.data() + 8, n, 8) != static_cast<ssize_t>(n)) {
        return errno_status("cannot read", path);
      }
    }
  }
  Result<SafetensorsHeader> header = parse_safetensors_header(prefix, file.file_size_);
  if (!header.ok()) return header.status().with_context(path.string());
  file.header_ = std::move(header).value();
  return file;
}

SafetensorsFile::SafetensorsFile(std::filesystem::path path, int fd, SafetensorsHeader header)
    : path_(std::move(path)), fd_(fd), header_(std::move(header)) {}

SafetensorsFile::SafetensorsFile(SafetensorsFile&& other) noexcept
    : path_(std::move(other.path_)),
      fd_(std::exchange(other.fd_, -1)),
      header_(std::move(other.header_)),
      file_size_(other.file_size_) {}

SafetensorsFile& SafetensorsFile::operator=(SafetensorsFile&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) ::close(fd_);
    path_ = std::move(other.path_);
    fd_ = std::exchange(other.fd_, -1);
    header_ = std::move(other.header_);
    file_size_ = other.file_size_;
  }
  return *this;
}

SafetensorsFile::~SafetensorsFile() {
  if (fd_ >= 0) ::close(fd_);
}

Status SafetensorsFile::read(uint64_t offset, std::span<std::byte> out) const {
  const uint64_t start = header_.data_start() + offset;
  if (offset > file_size_ || start + out.size() > file_size_) {
    return invalid_argument(path_.string() + ": read past the end of the file");
  }
  auto* p = reinterpret_cast<char*>(out.data());
  size_t left = out.size();
  auto pos = static_cast<off_t>(start);
  while (left > 0) {
    const ssize_t n = ::pread(fd_, p, left, pos);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return errno_status("cannot read", path_);
    if (n == 0) return invalid_argument(path_.string() + ": file shrank while reading");
    p += n;
    left -= static_cast<size_t>(n);
    pos += n;
  }
  return ok_status();
}

}  // namespace ntp::checkpoint
