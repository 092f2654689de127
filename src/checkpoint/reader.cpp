#include "checkpoint/reader.h"

#include <algorithm>
#include <cstring>
#include <fstream>
#include <numeric>
#include <sstream>

#include "checkpoint/checkpoint_dir.h"
#include "checkpoint/crc32c.h"

namespace ntp::checkpoint {
namespace fs = std::filesystem;
namespace {

// Chunks are read in batches of up to this many bytes (one pread each).
constexpr int64_t kBatchBytes = int64_t{16} << 20;
// Above this many (row, run) copies, a same-axis read gathers from the whole piece instead.
constexpr int64_t kMaxCopies = 4096;

int64_t product(const std::vector<int64_t>& shape, size_t begin, size_t end) {
  int64_t n = 1;
  for (size_t d = begin; d < end; ++d) n *= shape[d];
  return n;
}

std::vector<int64_t> identity(int64_t n) {
  std::vector<int64_t> v(static_cast<size_t>(n));
  std::iota(v.begin(), v.end(), int64_t{0});
  return v;
}

std::string hex32(uint32_t v) {
  char buf[16];
  std::snprintf(buf, sizeof(buf), "0x%08x", v);
  return buf;
}

Result<std::string> read_text(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return internal_error("cannot read " + path.string());
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

}  // namespace

CheckpointReader::CheckpointReader(CheckpointReader&&) noexcept = default;
CheckpointReader& CheckpointReader::operator=(CheckpointReader&&) noexcept = default;
CheckpointReader::~CheckpointReader() = default;

Result<CheckpointReader> CheckpointReader::open(const fs::path& dir) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) {
    return invalid_argument(dir.string() + " is not a directory (expected a checkpoint)");
  }
  fs::path step_dir = dir;
  if (!is_complete_step_dir(dir)) {
    if (!fs::exists(dir / kLatestFile, ec)) {
      return invalid_argument(dir.string() +
                              " is not a checkpoint: no manifest.json (an incomplete save, or not "
                              "a step directory) and no `latest` file");
    }
    Result<fs::path> latest = latest_step_dir(dir);
    if (!latest.ok()) return invalid_argument(latest.status().message());
    step_dir = *latest;
  }
  CheckpointReader r;
  r.step_dir_ = step_dir;
  NTP_ASSIGN_OR_RETURN(const std::string text, read_text(step_dir / kManifestFile));
  Result<Manifest> manifest = parse_manifest(text);
  if (!manifest.ok()) {
    return invalid_argument((step_dir / kManifestFile).string() + ": " +
                            manifest.status().message());
  }
  r.manifest_ = std::move(manifest).value();
  for (const PieceRecord& p : r.manifest_.pieces) {
    auto it = r.files_.find(p.file);
    if (it == r.files_.end()) {
      Result<SafetensorsFile> file = SafetensorsFile::open(step_dir / p.file);
      if (!file.ok()) {
        return invalid_argument((file.status().code() == StatusCode::kNotFound
                                     ? (step_dir / p.file).string() + ": missing"
                                     : file.status().message()) +
                                " (holds tensor " + piece_name(p.spec) + ")");
      }
      it = r.files_.emplace(p.file, std::move(file).value()).first;
    }
    const SafetensorsEntry* e = it->second.header().find(p.key);
    if (e == nullptr || e->dtype != "F32" || e->shape != local_shape(p.spec)) {
      return invalid_argument((step_dir / p.file).string() + ": tensor " + piece_name(p.spec) +
                              " is not stored under key '" + p.key + "' as F32 of its local shape");
    }
    r.by_tensor_[{p.spec.tensor, p.spec.kind}].push_back(&p);
  }
  return r;
}

bool CheckpointReader::has(const std::string& tensor, const std::string& kind) const {
  return by_tensor_.contains({tensor, kind});
}

Status CheckpointReader::read_piece(const PieceRecord& piece, const std::vector<Copy>& copies,
                                    float* dst, bool all_chunks) const {
  const SafetensorsFile& file = files_.at(piece.file);
  const uint64_t base = file.header().find(piece.key)->begin;
  const int64_t cb = piece.chunk_bytes;
  const int64_t piece_bytes = local_numel(piece.spec) * 4;
  std::vector<int64_t> chunks;
  if (all_chunks) {
    chunks = identity(static_cast<int64_t>(piece.crcs.size()));
  } else {
    for (const Copy& c : copies) {
      const int64_t last = ((c.src + c.count) * 4 - 1) / cb;
      for (int64_t k = c.src * 4 / cb; k <= last; ++k) {
        if (chunks.empty() || chunks.back() < k) chunks.push_back(k);
      }
    }
  }
  std::vector<std::byte> buffer;
  size_t next = 0;  // first copy that may intersect the current batch
  for (size_t i = 0; i < chunks.size();) {
    size_t j = i + 1;
    while (j < chunks.size() && chunks[j] == chunks[j - 1] + 1 &&
           (chunks[j] - chunks[i] + 1) * cb <= kBatchBytes) {
      ++j;
    }
    const int64_t b0 = chunks[i] * cb;
    const int64_t b1 = std::min((chunks[j - 1] + 1) * cb, piece_bytes);
    while (next < copies.size() && (copies[next].src + copies[next].count) * 4 <= b0) ++next;
    // Read straight into the destination when one copy spans the whole batch.
    const bool direct = dst != nullptr && next < copies.size() && copies[next].src * 4 <= b0 &&
                        (copies[next].src + copies[next].count) * 4 >= b1;
    std::byte* target;
    if (direct) {
      target = reinterpret_cast<std::byte*>(dst + copies[next].dst) + (b0 - copies[next].src * 4);
    } else {
      buffer.resize(static_cast<size_t>(b1 - b0));
      target = buffer.data();
    }
    NTP_RETURN_IF_ERROR(file.read(base + static_cast<uint64_t>(b0),
                                  std::span<std::byte>(target, static_cast<size_t>(b1 - b0))));
    stats_->bytes += b1 - b0;
    for (size_t k = i; k < j; ++k) {
      const int64_t c0 = chunks[k] * cb;
      const int64_t c1 = std::min(c0 + cb, piece_bytes);
      const uint32_t crc =
          crc32c(std::span<const std::byte>(target + (c0 - b0), static_cast<size_t>(c1 - c0)));
      const uint32_t stored = piece.crcs[static_cast<size_t>(chunks[k])];
      if (crc != stored) {
        return invalid_argument(
            file.path().string() + ": tensor " + piece_name(piece.spec) + ": chunk " +
            std::to_string(chunks[k]) + " of " + std::to_string(piece.crcs.size()) + " (bytes " +
            std::to_string(c0) + "-" + std::to_string(c1) + ") fails its checksum (manifest " +
            hex32(stored) + ", data " + hex32(crc) + ")");
      }
    }
    stats_->chunks += static_cast<int64_t>(j - i);
    if (!direct && dst != nullptr) {
      for (size_t m = next; m < copies.size() && copies[m].src * 4 < b1; ++m) {
        const int64_t lo = std::max(copies[m].src * 4, b0);
        const int64_t hi = std::min((copies[m].src + copies[m].count) * 4, b1);
        std::memcpy(dst + copies[m].dst + (lo - copies[m].src * 4) / 4, buffer.data() + (lo - b0),
                    static_cast<size_t>(hi - lo));
      }
    }
    i = j;
  }
  return ok_status();
}

Status CheckpointReader::read(const PieceSpec& request, std::span<float> out) const {
  NTP_RETURN_IF_ERROR(validate_piece_spec(request));
  auto it = by_tensor_.find({request.tensor, request.kind});
  if (it == by_tensor_.end()) {
    return not_found(step_dir_.string() + ": checkpoint has no tensor " + piece_name(request));
  }
  const std::vector<int64_t>& shape = it->second.front()->spec.logical_shape;
  if (request.logical_shape != shape) {
    return invalid_argument("tensor " + piece_name(request) + ": requested logical shape " +
                            nlohmann::json(request.logical_shape).dump() + " but " +
                            step_dir_.string() + " stores " + nlohmann::json(shape).dump());
  }
  if (static_cast<int64_t>(out.size()) != local_numel(request)) {
    return invalid_argument("tensor " + piece_name(request) + ": output holds " +
                            std::to_string(out.size()) + " floats, the request's local shape " +
                            std::to_string(local_numel(request)));
  }
  std::vector<const PieceRecord*> pieces;
  int stored_axis = -1;
  for (const PieceRecord* p : it->second) {
    if (p->spec.whole() || !p->spec.index.empty()) {
      pieces.push_back(p);
      stored_axis = p->spec.axis;
    }
  }
  if (shape.empty()) {  // a scalar: one whole piece
    return read_piece(*pieces.front(), {Copy{0, 0, 1}}, out.data());
  }
  if (out.empty()) return ok_status();
  const int ra = request.axis;
  if (ra >= 0 && stored_axis >= 0 && ra != stored_axis) {
    return read_cross_axis(request, pieces, out);
  }
  const int axis = ra >= 0 ? ra : (stored_axis >= 0 ? stored_axis : 0);
  return read_same_axis(request, axis, pieces, out);
}

Status CheckpointReader::read_same_axis(const PieceSpec& request, int axis,
                                        const std::vector<const PieceRecord*>& pieces,
                                        std::span<float> out) const {
  const std::vector<int64_t>& shape = request.logical_shape;
  const auto ax = static_cast<size_t>(axis);
  const int64_t outer = product(shape, 0, ax);
  const int64_t inner = product(shape, ax + 1, shape.size());
  const int64_t dim = shape[ax];
  const std::vector<int64_t> wanted = request.whole() ? identity(dim) : request.index;
  const auto n_r = static_cast<int64_t>(wanted.size());
  // Logical slice -> (piece ordinal, local position in that piece).
  std::vector<std::pair<int32_t, int64_t>> where(static_cast<size_t>(dim), {-1, -1});
  for (size_t p = 0; p < pieces.size(); ++p) {
    const std::vector<int64_t> index =
        pieces[p]->spec.whole() ? identity(dim) : pieces[p]->spec.index;
    for (size_t j = 0; j < index.size(); ++j) {
      where[static_cast<size_t>(index[j])] = {static_cast<int32_t>(p), static_cast<int64_t>(j)};
    }
  }
  std::vector<std::vector<std::pair<int64_t, int64_t>>> wanted_from(pieces.size());  // (j, i)
  for (int64_t i = 0; i < n_r; ++i) {
    const auto [p, j] = where[static_cast<size_t>(wanted[static_cast<size_t>(i)])];
    NTP_CHECK(p >= 0);  // coverage was checked when the manifest was read
    wanted_from[static_cast<size_t>(p)].emplace_back(j, i);
  }
  for (size_t p = 0; p < pieces.size(); ++p) {
    auto& pairs = wanted_from[p];
    if (pairs.empty()) continue;
    std::sort(pairs.begin(), pairs.end());
    const int64_t n_p =
        pieces[p]->spec.whole() ? dim : static_cast<int64_t>(pieces[p]->spec.index.size());
    struct Run {
      int64_t j, i, n;
    };
    std::vector<Run> runs;
    for (const auto& [j, i] : pairs) {
      if (!runs.empty() && runs.back().j + runs.back().n == j &&
          runs.back().i + runs.back().n == i) {
        ++runs.back().n;
      } else {
        runs.push_back({j, i, 1});
      }
    }
    const int64_t piece_numel = outer * n_p * inner;
    if (outer > 1 && static_cast<int64_t>(runs.size()) * outer > kMaxCopies) {
      // Many short runs in many rows (a reshard of finely interleaved units): one list entry
      // per (row, run) would cost more than the data. Read the piece whole, then gather rows.
      std::vector<float> buffer(static_cast<size_t>(piece_numel));
      NTP_RETURN_IF_ERROR(read_piece(*pieces[p], {Copy{0, 0, piece_numel}}, buffer.data()));
      for (int64_t o = 0; o < outer; ++o) {
        const float* src = buffer.data() + o * n_p * inner;
        float* dst = out.data() + o * n_r * inner;
        for (const Run& r : runs) {
          if (r.n * inner == 1) {
            dst[r.i] = src[r.j];
          } else {
            std::memcpy(dst + r.i * inner, src + r.j * inner,
                        static_cast<size_t>(r.n * inner) * sizeof(float));
          }
        }
      }
      continue;
    }
    std::vector<Copy> copies;
    for (int64_t o = 0; o < outer; ++o) {
      for (const Run& r : runs) {
        const Copy c{(o * n_p + r.j) * inner, (o * n_r + r.i) * inner, r.n * inner};
        if (!copies.empty() && copies.back().src + copies.back().count == c.src &&
            copies.back().dst + copies.back().count == c.dst) {
          copies.back().count += c.count;
        } else {
          copies.push_back(c);
        }
      }
    }
    NTP_RETURN_IF_ERROR(read_piece(*pieces[p], copies, out.data()));
  }
  return ok_status();
}

Status CheckpointReader::read_cross_axis(const PieceSpec& request,
                                         const std::vector<const PieceRecord*>& pieces,
                                         std::span<float> out) const {
  const std::vector<int64_t>& shape = request.logical_shape;
  const size_t rank = shape.size();
  const auto r = static_cast<size_t>(request.axis);
  std::vector<int64_t> wanted_pos(static_cast<size_t>(shape[r]), -1);  // logical -> request pos
  for (size_t i = 0; i < request.index.size(); ++i) {
    wanted_pos[static_cast<size_t>(request.index[i])] = static_cast<int64_t>(i);
  }
  std::vector<int64_t> out_shape = local_shape(request);
  std::vector<int64_t> out_stride(rank, 1);
  for (size_t d = rank - 1; d > 0; --d) out_stride[d - 1] = out_stride[d] * out_shape[d];
  std::vector<float> buffer;
  for (const PieceRecord* piece : pieces) {
    const auto a = static_cast<size_t>(piece->spec.axis);
    const std::vector<int64_t> p_shape = local_shape(piece->spec);
    const int64_t numel = local_numel(piece->spec);
    if (numel == 0) continue;
    buffer.resize(static_cast<size_t>(numel));
    NTP_RETURN_IF_ERROR(read_piece(*piece, {Copy{0, 0, numel}}, buffer.data()));
    const int64_t row_len = p_shape[rank - 1];
    const int64_t rows = numel / row_len;
    for (int64_t row = 0; row < rows; ++row) {
      // Coordinates of this row in the piece (all dims but the last), mapped to the output.
      int64_t rest = row, base = 0;
      bool wanted = true;
      for (size_t d = rank - 1; d-- > 0;) {
        const int64_t c = rest % p_shape[d];
        rest /= p_shape[d];
        int64_t oc = c;
        if (d == a) oc = piece->spec.index[static_cast<size_t>(c)];
        if (d == r) oc = wanted_pos[static_cast<size_t>(c)];
        if (oc < 0) wanted = false;
        base += oc * out_stride[d];
      }
      if (!wanted) continue;
      const float* src = buffer.data() + row * row_len;
      if (rank - 1 == a) {
        for (int64_t x = 0; x < row_len; ++x)
          out[static_cast<size_t>(base + piece->spec.index[static_cast<size_t>(x)])] = src[x];
      } else if (rank - 1 == r) {
        for (int64_t x = 0; x < row_len; ++x) {
          const int64_t pos = wanted_pos[static_cast<size_t>(x)];
          if (pos >= 0) out[static_cast<size_t>(base + pos)] = src[x];
        }
      } else {
        std::memcpy(out.data() + base, src, static_cast<size_t>(row_len) * sizeof(float));
      }
    }
  }
  return ok_status();
}

Status CheckpointReader::verify_all() const {
  for (const PieceRecord& p : manifest_.pieces) {
    NTP_RETURN_IF_ERROR(read_piece(p, {}, nullptr, /*all_chunks=*/true));
  }
  return ok_status();
}

}  // namespace ntp::checkpoint
