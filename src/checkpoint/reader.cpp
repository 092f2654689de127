#include "checkpoint/reader.h"

#include <algorithm>
#include <cstring>
#include <fstream>
#include <map>
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
// The pieces of one tensor read whole are held together up to this many floats (256 MiB).
constexpr int64_t kGroupFloats = int64_t{64} << 20;

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

// Everything that one pass over one stored piece serves.
struct CheckpointReader::PiecePlan {
  // A run of n consecutive slices: piece position j -> request position i.
  struct Run {
    int64_t j, i, n;
  };
  // Row-by-row copies of `runs` out of a piece viewed as [outer, n_p, inner] into a request
  // viewed as [outer, n_r, inner].
  struct Gather {
    float* dst;
    int64_t outer, n_p, n_r, inner;
    std::vector<Run> runs;  // runs of more than one element (n * inner > 1)
    // Single elements: piece position from[k] -> request position to[k] within a row.
    std::vector<int32_t> from, to;
  };
  const PieceRecord* piece = nullptr;
  std::vector<Copy> copies;     // contiguous copies out of the piece
  std::vector<Gather> gathers;  // need the whole piece
  std::vector<Job> cross;       // requests along another axis: need the whole piece
  bool whole() const { return !gathers.empty() || !cross.empty(); }
};

Status CheckpointReader::read_piece(const PieceRecord& piece, const std::vector<Copy>& copies,
                                    std::vector<std::byte>& buffer, bool all_chunks) const {
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
      for (int64_t k = std::max(c.src * 4 / cb, chunks.empty() ? 0 : chunks.back() + 1); k <= last;
           ++k) {
        chunks.push_back(k);
      }
    }
  }
  // reach[m]: the furthest byte any of copies[0..m] ends at (copies may overlap, sorted by src).
  std::vector<int64_t> reach(copies.size());
  for (size_t m = 0; m < copies.size(); ++m) {
    reach[m] = std::max(m > 0 ? reach[m - 1] : 0, (copies[m].src + copies[m].count) * 4);
  }
  size_t next = 0;  // copies before it end at or before the current batch
  for (size_t i = 0; i < chunks.size();) {
    size_t j = i + 1;
    while (j < chunks.size() && chunks[j] == chunks[j - 1] + 1 &&
           (chunks[j] - chunks[i] + 1) * cb <= kBatchBytes) {
      ++j;
    }
    const int64_t b0 = chunks[i] * cb;
    const int64_t b1 = std::min((chunks[j - 1] + 1) * cb, piece_bytes);
    while (next < copies.size() && reach[next] <= b0) ++next;
    // Read straight into the destination when one copy alone spans the whole batch.
    size_t hits = 0, hit = 0;
    for (size_t m = next; m < copies.size() && copies[m].src * 4 < b1 && hits < 2; ++m) {
      if ((copies[m].src + copies[m].count) * 4 > b0) {
        ++hits;
        hit = m;
      }
    }
    const bool direct =
        hits == 1 && copies[hit].src * 4 <= b0 && (copies[hit].src + copies[hit].count) * 4 >= b1;
    std::byte* target;
    if (direct) {
      target = reinterpret_cast<std::byte*>(copies[hit].dst) + (b0 - copies[hit].src * 4);
    } else {
      if (buffer.size() < static_cast<size_t>(b1 - b0)) buffer.resize(static_cast<size_t>(b1 - b0));
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
    if (!direct) {
      for (size_t m = next; m < copies.size() && copies[m].src * 4 < b1; ++m) {
        const int64_t lo = std::max(copies[m].src * 4, b0);
        const int64_t hi = std::min((copies[m].src + copies[m].count) * 4, b1);
        if (lo >= hi) continue;
        std::memcpy(copies[m].dst + (lo - copies[m].src * 4) / 4, buffer.data() + (lo - b0),
                    static_cast<size_t>(hi - lo));
      }
    }
    i = j;
  }
  return ok_status();
}

Status CheckpointReader::check_request(const PieceSpec& request, std::span<float> out,
                                       const std::vector<const PieceRecord*>** pieces) const {
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
  *pieces = &it->second;
  return ok_status();
}

Status CheckpointReader::read(const PieceSpec& request, std::span<float> out) const {
  return read_jobs({Job{&request, out}});
}

Status CheckpointReader::read_all(std::span<const Request> requests) const {
  std::vector<Job> jobs;
  jobs.reserve(requests.size());
  for (const Request& r : requests) jobs.push_back({&r.spec, r.out});
  return read_jobs(jobs);
}

Status CheckpointReader::read_jobs(const std::vector<Job>& jobs) const {
  // Plans keyed by the stored piece, in manifest order (the order the files were written in).
  std::map<const PieceRecord*, PiecePlan> plans;
  std::vector<PiecePlan> per_job;
  for (const Job& job : jobs) {
    const std::vector<const PieceRecord*>* stored = nullptr;
    NTP_RETURN_IF_ERROR(check_request(*job.spec, job.out, &stored));
    std::vector<const PieceRecord*> pieces;
    int stored_axis = -1;
    for (const PieceRecord* p : *stored) {
      if (p->spec.whole() || !p->spec.index.empty()) {
        pieces.push_back(p);
        stored_axis = p->spec.axis;
      }
    }
    if (job.spec->logical_shape.empty()) {  // a scalar: one whole piece
      plans[pieces.front()].copies.push_back({0, job.out.data(), 1});
      continue;
    }
    if (job.out.empty()) continue;
    const int ra = job.spec->axis;
    if (ra >= 0 && stored_axis >= 0 && ra != stored_axis) {
      for (const PieceRecord* p : pieces) {
        if (local_numel(p->spec) > 0) plans[p].cross.push_back(job);
      }
      continue;
    }
    per_job.assign(pieces.size(), PiecePlan{});
    plan_same_axis(job, ra >= 0 ? ra : (stored_axis >= 0 ? stored_axis : 0), pieces, per_job);
    for (size_t p = 0; p < pieces.size(); ++p) {
      PiecePlan& plan = plans[pieces[p]];
      // Each request's copies are sorted by src; keep the plan's sorted as they are appended.
      const auto middle = static_cast<std::ptrdiff_t>(plan.copies.size());
      plan.copies.insert(plan.copies.end(), per_job[p].copies.begin(), per_job[p].copies.end());
      std::inplace_merge(plan.copies.begin(), plan.copies.begin() + middle, plan.copies.end(),
                         [](const Copy& x, const Copy& y) { return x.src < y.src; });
      for (PiecePlan::Gather& g : per_job[p].gathers) plan.gathers.push_back(std::move(g));
    }
  }
  std::unique_lock<std::mutex> lock(scratch_->mutex, std::try_to_lock);
  std::unique_ptr<Scratch> own = lock.owns_lock() ? nullptr : std::make_unique<Scratch>();
  Scratch& scratch = own ? *own : *scratch_;
  std::map<std::pair<std::string, std::string>, std::vector<const PiecePlan*>> by_tensor;
  for (auto& [piece, plan] : plans) {
    plan.piece = piece;
    by_tensor[{piece->spec.tensor, piece->spec.kind}].push_back(&plan);
  }
  for (const auto& [key, group] : by_tensor) NTP_RETURN_IF_ERROR(execute(group, scratch));
  return ok_status();
}

void CheckpointReader::plan_same_axis(const Job& job, int axis,
                                      const std::vector<const PieceRecord*>& pieces,
                                      std::vector<PiecePlan>& plans) const {
  const PieceSpec& request = *job.spec;
  const std::vector<int64_t>& shape = request.logical_shape;
  const auto ax = static_cast<size_t>(axis);
  const int64_t outer = product(shape, 0, ax);
  const int64_t inner = product(shape, ax + 1, shape.size());
  const int64_t dim = shape[ax];
  const auto n_r = request.whole() ? dim : static_cast<int64_t>(request.index.size());
  auto wanted = [&](int64_t i) {
    return request.whole() ? i : request.index[static_cast<size_t>(i)];
  };
  // Logical slice -> (piece ordinal, local position in that piece).
  std::vector<std::pair<int32_t, int64_t>> where(static_cast<size_t>(dim), {-1, -1});
  for (size_t p = 0; p < pieces.size(); ++p) {
    const PieceSpec& spec = pieces[p]->spec;
    const auto n = spec.whole() ? dim : static_cast<int64_t>(spec.index.size());
    for (int64_t j = 0; j < n; ++j) {
      const int64_t id = spec.whole() ? j : spec.index[static_cast<size_t>(j)];
      where[static_cast<size_t>(id)] = {static_cast<int32_t>(p), j};
    }
  }
  std::vector<std::vector<std::pair<int64_t, int64_t>>> wanted_from(pieces.size());  // (j, i)
  for (int64_t i = 0; i < n_r; ++i) {
    const auto [p, j] = where[static_cast<size_t>(wanted(i))];
    NTP_CHECK(p >= 0);  // coverage was checked when the manifest was read
    wanted_from[static_cast<size_t>(p)].emplace_back(j, i);
  }
  for (size_t p = 0; p < pieces.size(); ++p) {
    auto& pairs = wanted_from[p];
    if (pairs.empty()) continue;
    std::sort(pairs.begin(), pairs.end());
    const int64_t n_p =
        pieces[p]->spec.whole() ? dim : static_cast<int64_t>(pieces[p]->spec.index.size());
    std::vector<PiecePlan::Run> runs;
    for (const auto& [j, i] : pairs) {
      if (!runs.empty() && runs.back().j + runs.back().n == j &&
          runs.back().i + runs.back().n == i) {
        ++runs.back().n;
      } else {
        runs.push_back({j, i, 1});
      }
    }
    if (outer > 1 && static_cast<int64_t>(runs.size()) * outer > kMaxCopies) {
      // Many short runs in many rows (a reshard of finely interleaved units): one list entry
      // per (row, run) would cost more than the data. Read the piece whole, then gather rows.
      PiecePlan::Gather g{job.out.data(), outer, n_p, n_r, inner, {}, {}, {}};
      for (const PiecePlan::Run& r : runs) {
        if (r.n * inner == 1) {
          g.from.push_back(static_cast<int32_t>(r.j));
          g.to.push_back(static_cast<int32_t>(r.i));
        } else {
          g.runs.push_back(r);
        }
      }
      // Stores in ascending order: the output row is written front to back.
      std::vector<std::pair<int32_t, int32_t>> by_to;
      for (size_t k = 0; k < g.to.size(); ++k) by_to.emplace_back(g.to[k], g.from[k]);
      std::sort(by_to.begin(), by_to.end());
      for (size_t k = 0; k < by_to.size(); ++k) {
        g.to[k] = by_to[k].first;
        g.from[k] = by_to[k].second;
      }
      plans[p].gathers.push_back(std::move(g));
      continue;
    }
    std::vector<Copy>& copies = plans[p].copies;
    for (int64_t o = 0; o < outer; ++o) {
      for (const PiecePlan::Run& r : runs) {
        const Copy c{(o * n_p + r.j) * inner, job.out.data() + (o * n_r + r.i) * inner,
                     r.n * inner};
        if (!copies.empty() && copies.back().src + copies.back().count == c.src &&
            copies.back().dst + copies.back().count == c.dst) {
          copies.back().count += c.count;
        } else {
          copies.push_back(c);
        }
      }
    }
  }
}

namespace {

// Scatters a whole stored piece (`src`, its local shape) that is split along another axis than
// `request` into the request's destination.
void scatter_cross_axis(const PieceSpec& piece, const float* src, const PieceSpec& request,
                        std::span<float> out) {
  const std::vector<int64_t>& shape = request.logical_shape;
  const size_t rank = shape.size();
  const auto r = static_cast<size_t>(request.axis);
  const auto a = static_cast<size_t>(piece.axis);
  std::vector<int64_t> wanted_pos(static_cast<size_t>(shape[r]), -1);  // logical -> request pos
  for (size_t i = 0; i < request.index.size(); ++i) {
    wanted_pos[static_cast<size_t>(request.index[i])] = static_cast<int64_t>(i);
  }
  const std::vector<int64_t> out_shape = local_shape(request);
  std::vector<int64_t> out_stride(rank, 1);
  for (size_t d = rank - 1; d > 0; --d) out_stride[d - 1] = out_stride[d] * out_shape[d];
  const std::vector<int64_t> p_shape = local_shape(piece);
  const int64_t row_len = p_shape[rank - 1];
  const int64_t rows = local_numel(piece) / row_len;
  for (int64_t row = 0; row < rows; ++row) {
    // Coordinates of this row in the piece (all dims but the last), mapped to the output.
    int64_t rest = row, base = 0;
    bool wanted = true;
    for (size_t d = rank - 1; d-- > 0;) {
      const int64_t c = rest % p_shape[d];
      rest /= p_shape[d];
      int64_t oc = c;
      if (d == a) oc = piece.index[static_cast<size_t>(c)];
      if (d == r) oc = wanted_pos[static_cast<size_t>(c)];
      if (oc < 0) wanted = false;
      base += oc * out_stride[d];
    }
    if (!wanted) continue;
    const float* s = src + row * row_len;
    if (rank - 1 == a) {
      for (int64_t x = 0; x < row_len; ++x)
        out[static_cast<size_t>(base + piece.index[static_cast<size_t>(x)])] = s[x];
    } else if (rank - 1 == r) {
      for (int64_t x = 0; x < row_len; ++x) {
        const int64_t pos = wanted_pos[static_cast<size_t>(x)];
        if (pos >= 0) out[static_cast<size_t>(base + pos)] = s[x];
      }
    } else {
      std::memcpy(out.data() + base, s, static_cast<size_t>(row_len) * sizeof(float));
    }
  }
}

}  // namespace

namespace {

// Row o of a gather from `src` (the whole piece).
void gather_row(const CheckpointReader::PiecePlan::Gather& g, const float* src, int64_t o) {
  const float* s = src + o * g.n_p * g.inner;
  float* d = g.dst + o * g.n_r * g.inner;
  for (size_t k = 0; k < g.from.size(); ++k) d[g.to[k]] = s[g.from[k]];
  for (const CheckpointReader::PiecePlan::Run& r : g.runs) {
    std::memcpy(d + r.i * g.inner, s + r.j * g.inner,
                static_cast<size_t>(r.n * g.inner) * sizeof(float));
  }
}

}  // namespace

Status CheckpointReader::execute(const std::vector<const PiecePlan*>& group,
                                 Scratch& scratch) const {
  // The pieces read whole, each into its own region of scratch.floats when they fit together (a
  // group holds the pieces of one tensor: at most its size), else one at a time.
  int64_t whole = 0;
  for (const PiecePlan* plan : group) {
    if (plan->whole()) whole += local_numel(plan->piece->spec);
  }
  const bool together = whole <= kGroupFloats;
  std::vector<float>& buffer = scratch.floats;
  if (together && buffer.size() < static_cast<size_t>(whole)) {
    buffer.resize(static_cast<size_t>(whole));
  }
  // Row gathers of every piece, with their piece's data, done below row by row over all pieces:
  // each destination row is then written while it is in cache (a piece at a time would sweep
  // every destination once per piece).
  std::vector<std::pair<const PiecePlan::Gather*, const float*>> gathers;
  int64_t offset = 0;
  for (const PiecePlan* plan : group) {
    if (!plan->whole()) {
      NTP_RETURN_IF_ERROR(read_piece(*plan->piece, plan->copies, scratch.bytes));
      continue;
    }
    const int64_t numel = local_numel(plan->piece->spec);
    if (!together && buffer.size() < static_cast<size_t>(numel)) {
      buffer.resize(static_cast<size_t>(numel));
    }
    float* data = buffer.data() + (together ? offset : 0);
    offset += numel;
    NTP_RETURN_IF_ERROR(read_piece(*plan->piece, {Copy{0, data, numel}}, scratch.bytes));
    for (const Copy& c : plan->copies) {
      std::memcpy(c.dst, data + c.src, static_cast<size_t>(c.count) * sizeof(float));
    }
    for (const Job& job : plan->cross) {
      scatter_cross_axis(plan->piece->spec, data, *job.spec, job.out);
    }
    for (const PiecePlan::Gather& g : plan->gathers) {
      if (together) {
        gathers.emplace_back(&g, data);
      } else {
        for (int64_t o = 0; o < g.outer; ++o) gather_row(g, data, o);
      }
    }
  }
  // By destination, then row by row over every piece gathering into it.
  std::sort(gathers.begin(), gathers.end(),
            [](const auto& a, const auto& b) { return a.first->dst < b.first->dst; });
  for (size_t i = 0; i < gathers.size();) {
    size_t j = i;
    while (j < gathers.size() && gathers[j].first->dst == gathers[i].first->dst) ++j;
    for (int64_t o = 0; o < gathers[i].first->outer; ++o) {
      for (size_t k = i; k < j; ++k) gather_row(*gathers[k].first, gathers[k].second, o);
    }
    i = j;
  }
  return ok_status();
}

Status CheckpointReader::verify_all() const {
  std::vector<std::byte> buffer;
  for (const PieceRecord& p : manifest_.pieces) {
    NTP_RETURN_IF_ERROR(read_piece(p, {}, buffer, /*all_chunks=*/true));
  }
  return ok_status();
}

}  // namespace ntp::checkpoint
