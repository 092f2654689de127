// Checkpoint save and load throughput as a fraction of plain sequential file I/O of the same
// bytes, measured side by side in one run, and how long an asynchronous save blocks its caller.
//
//   build/bench/checkpoint/checkpoint_bench [--layers L] [--width C] [--writers W] [--replicas P]
//                                           [--rounds R] [--dir DIR] [--keep 1]
// Defaults: GPT-2 of 4 layers, width 384, context 256, vocabulary 256 (7.3 M parameters; value +
// exp_avg + exp_avg_sq = 88 MB), saved by 4 writer ranks of a shuffled TP layout; 2 replicas for
// the spread save; 5 rounds; DIR
// defaults to ./checkpoint_bench.tmp (use a real disk: fsync on tmpfs is free); --keep 1 leaves the
// last checkpoint there for `ntp ckpt inspect/verify`.
//
// Per round, interleaved so that both sides see the same machine load (the save sides alternate
// which goes first):
//   save    write_shard for each writer (CRC-32C per 1 MiB chunk, fsync, rename, directory fsync)
//           + commit_checkpoint (manifest, latest)  vs  plain: for each writer, one file written
//           with write(2) piece by piece + fsync.
//   load    CheckpointReader::open + read_all of every piece of every rank (a pass per rank) at
//           the same layout, and at a different layout (3 ranks, another shuffle: a reshard) in
//           one pass for the three and in a pass per rank  vs  plain: pread of every file in
//           16 MiB blocks. Warm = files in the page cache (just written); cold = evicted first
//           with posix_fadvise(DONTNEED) on both sides.
//   spread  P replicas x W ranks (one layout) each writing its share (checkpoint/spread.h) vs
//           replica 0's W ranks alone, one after the other in this process: the cost of the
//           spread on one disk; the largest writer's bytes say what it gains when a job's ranks
//           write in parallel. Loads of that checkpoint at the same layout (units in increasing
//           order, as the trainer stores them) and at the other one (one pass).
//   async   AsyncShardWriter::snapshot (the copy: the only time the training thread is blocked;
//           one writer per rank, reusing its previous snapshot's memory) vs the whole save
//           (snapshots + the ranks' background writes + wait).
// Each figure is the median over rounds; ratios are plain time / ntp time (1.0 = as fast as
// plain I/O).
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "checkpoint/async_shard_writer.h"
#include "checkpoint/checkpoint_dir.h"
#include "checkpoint/crc32c.h"
#include "checkpoint/model_pieces.h"
#include "checkpoint/reader.h"
#include "checkpoint/spread.h"
#include "machine_info.h"
#include "model/gpt_model.h"

namespace {

namespace fs = std::filesystem;
namespace ck = ntp::checkpoint;
using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

void die(const ntp::Status& s) {
  std::fprintf(stderr, "error: %s\n", s.to_string().c_str());
  std::exit(1);
}

// One writer rank: its pieces (value + two moments of every param it writes) and their data.
struct Rank {
  std::string id;  // writer id
  std::vector<std::vector<float>> data;
  std::vector<ck::PieceView> views;
  int64_t bytes = 0;
};

// shuffled_layout with each rank's units in increasing order (the trainer's storage order).
std::vector<ntp::model::TpShard> sorted_shuffle(const ntp::model::GptConfig& config, int degree,
                                                uint64_t seed) {
  auto layout = ntp::model::shuffled_layout(config, degree, seed);
  for (ntp::model::TpShard& shard : layout) {
    for (auto* ids : {&shard.heads, &shard.ffn_units, &shard.vocab_rows}) {
      std::sort(ids->begin(), ids->end());
    }
  }
  return layout;
}

// Every rank of `replicas` replicas of `degree` ranks, all at the layout of make_ranks(config,
// degree, 11) (a healthy job's replicas share one layout), with the views of its share under the
// spread rule (checkpoint/spread.h, default minimum part), as a job's ranks write them: units
// stored in increasing order, as the trainer's model shards list them.
std::vector<Rank> make_spread_ranks(const ntp::model::GptConfig& config, int degree, int replicas) {
  std::vector<Rank> out;
  const std::vector<int> degrees(static_cast<size_t>(replicas), degree);
  for (int rep = 0; rep < replicas; ++rep) {
    const auto layout = sorted_shuffle(config, degree, 11);
    for (int r = 0; r < degree; ++r) {
      auto model = ntp::model::GptModel::create(config, layout[static_cast<size_t>(r)], 1).value();
      Rank& rank = out.emplace_back();
      rank.id = std::to_string(rep) + "_" + std::to_string(r);
      rank.data.reserve(model.params().size() * 3);
      const ck::SpreadSlot slot{rep, r, degrees};
      for (const ntp::model::Param& p : model.params()) {
        for (const char* kind : {"value", "exp_avg", "exp_avg_sq"}) {
          std::vector<float>& d =
              rank.data.emplace_back(p.value.span().begin(), p.value.span().end());
          if (std::string(kind) != "value") {
            for (float& v : d) v *= 0.5f;
          }
          for (ck::PieceView& v : ck::spread_param_views(p, kind, d, slot)) {
            rank.bytes += ck::local_numel(v.spec) * 4;
            rank.views.push_back(std::move(v));
          }
        }
      }
    }
  }
  return out;
}

// `sorted`: units stored in increasing order (as the trainer stores them), else in shuffle order.
std::vector<Rank> make_ranks(const ntp::model::GptConfig& config, int degree, uint64_t seed,
                             bool sorted = false) {
  std::vector<Rank> ranks(static_cast<size_t>(degree));
  const auto layout = sorted ? sorted_shuffle(config, degree, seed)
                             : ntp::model::shuffled_layout(config, degree, seed);
  for (int r = 0; r < degree; ++r) {
    auto model = ntp::model::GptModel::create(config, layout[static_cast<size_t>(r)], 1).value();
    Rank& rank = ranks[static_cast<size_t>(r)];
    rank.id = std::to_string(r);
    std::vector<ck::PieceSpec> specs;
    for (const ntp::model::Param& p : model.params()) {
      if (p.replicated() && r != 0) continue;  // one writer per replicated tensor
      for (const char* kind : {"value", "exp_avg", "exp_avg_sq"}) {
        specs.push_back(ck::param_piece(p, kind));
        rank.data.emplace_back(p.value.span().begin(), p.value.span().end());
        if (std::string(kind) != "value") {
          for (float& v : rank.data.back()) v *= 0.5f;
        }
      }
    }
    for (size_t i = 0; i < specs.size(); ++i) {
      rank.views.push_back({specs[i], rank.data[i]});
      rank.bytes += static_cast<int64_t>(rank.data[i].size() * 4);
    }
  }
  return ranks;
}

void write_all(int fd, const void* p, size_t n) {
  const char* c = static_cast<const char*>(p);
  while (n > 0) {
    const ssize_t w = ::write(fd, c, n);
    if (w <= 0) std::exit(1);
    c += w;
    n -= static_cast<size_t>(w);
  }
}

// Plain baseline: each rank's pieces written to one file in order, then fsync.
double plain_write(const fs::path& dir, const std::vector<Rank>& ranks) {
  const auto t = Clock::now();
  for (size_t r = 0; r < ranks.size(); ++r) {
    const fs::path path = dir / ("plain_" + std::to_string(r));
    const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    for (const ck::PieceView& v : ranks[r].views) write_all(fd, v.data.data(), v.data.size_bytes());
    ::fsync(fd);
    ::close(fd);
  }
  return seconds_since(t);
}

double plain_read(const fs::path& dir, size_t files, std::vector<char>& buffer) {
  const auto t = Clock::now();
  for (size_t r = 0; r < files; ++r) {
    const int fd = ::open((dir / ("plain_" + std::to_string(r))).c_str(), O_RDONLY);
    off_t off = 0;
    ssize_t n;
    while ((n = ::pread(fd, buffer.data() + off, 16 << 20, off)) > 0) off += n;
    ::close(fd);
  }
  return seconds_since(t);
}

void evict(const fs::path& dir) {
  for (const auto& e : fs::recursive_directory_iterator(dir)) {
    if (!e.is_regular_file()) continue;
    const int fd = ::open(e.path().c_str(), O_RDONLY);
    ::fdatasync(fd);
    ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
    ::close(fd);
  }
}

double ntp_save(const fs::path& save_dir, int64_t step, const std::vector<Rank>& ranks) {
  const auto t = Clock::now();
  const fs::path dir = ck::prepare_step_dir(save_dir, step).value();
  std::vector<ck::ShardRecord> records;
  for (size_t r = 0; r < ranks.size(); ++r) {
    auto rec = ck::write_shard(dir, ranks[r].id, ranks[r].views);
    if (!rec.ok()) die(rec.status());
    records.push_back(std::move(rec).value());
  }
  ck::CheckpointMeta meta;
  meta.step = step;
  if (auto m = ck::commit_checkpoint(save_dir, meta, records, {.keep_last = 1}); !m.ok()) {
    die(m.status());
  }
  return seconds_since(t);
}

// How ntp_load groups its requests into CheckpointReader::read_all passes.
enum class Pass { kPerRank, kAllRanks };

// Reads every piece of `ranks` (a layout, possibly not the one written) into their buffers: one
// read_all per rank (what each rank of a job does), or one for all of them (one process loading
// the state of every rank: each stored chunk read and CRC-checked once). Returns the total time;
// `open_s` gets the part spent in CheckpointReader::open, `bytes_read` the bytes read from files.
double ntp_load(const fs::path& save_dir, std::vector<Rank>& ranks, Pass pass,
                double* open_s = nullptr, int64_t* bytes_read = nullptr) {
  const auto t = Clock::now();
  auto reader = ck::CheckpointReader::open(save_dir);
  if (!reader.ok()) die(reader.status());
  if (open_s != nullptr) *open_s = seconds_since(t);
  std::vector<ck::CheckpointReader::Request> requests;
  for (Rank& rank : ranks) {
    for (size_t i = 0; i < rank.views.size(); ++i) {
      requests.push_back({rank.views[i].spec, rank.data[i]});
    }
    if (pass == Pass::kAllRanks) continue;
    if (auto s = reader->read_all(requests); !s.ok()) die(s);
    requests.clear();
  }
  if (auto s = reader->read_all(requests); !s.ok()) die(s);
  if (bytes_read != nullptr) *bytes_read = reader->bytes_read();
  return seconds_since(t);
}

}  // namespace

int main(int argc, char** argv) {
  int64_t layers = 4, width = 384;
  int writers = 4, rounds = 5, replicas = 2;
  bool keep = false;
  fs::path dir = "checkpoint_bench.tmp";
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    const long value = std::strtol(argv[i + 1], nullptr, 10);
    if (flag == "--dir") {
      dir = argv[i + 1];
      continue;
    }
    if (value <= 0) {
      std::fprintf(stderr, "error: %s needs a positive integer, got '%s'\n", flag.c_str(),
                   argv[i + 1]);
      return 2;
    }
    if (flag == "--layers") {
      layers = value;
    } else if (flag == "--width") {
      width = value;
    } else if (flag == "--writers") {
      writers = static_cast<int>(value);
    } else if (flag == "--replicas") {
      replicas = static_cast<int>(value);
    } else if (flag == "--rounds") {
      rounds = static_cast<int>(value);
    } else if (flag == "--keep") {
      keep = value != 0;
    } else {
      std::fprintf(
          stderr,
          "error: unknown flag %s (use --layers, --width, --writers, --replicas, --rounds, --dir, "
          "--keep)\n",
          flag.c_str());
      return 2;
    }
  }
  ntp::model::GptConfig config;
  config.n_layer = layers;
  config.n_embd = width;
  config.n_head = std::max<int64_t>(1, width / 64);
  config.n_ctx = 256;
  config.vocab_size = 256;
  std::vector<Rank> ranks = make_ranks(config, writers, 11);
  std::vector<Rank> same = make_ranks(config, writers, 11);
  std::vector<Rank> other = make_ranks(config, writers == 3 ? 5 : 3, 23);
  std::vector<Rank> same_sorted = make_ranks(config, writers, 11, /*sorted=*/true);
  const std::vector<Rank> spread = make_spread_ranks(config, writers, replicas);
  int64_t spread_max = 0;
  for (const Rank& r : spread) spread_max = std::max(spread_max, r.bytes);
  int64_t bytes = 0, max_rank = 0;
  for (const Rank& r : ranks) {
    bytes += r.bytes;
    max_rank = std::max(max_rank, r.bytes);
  }
  fs::remove_all(dir);
  fs::create_directories(dir / "plain");
  const fs::path save_dir = dir / "ckpt";
  std::vector<char> read_buffer(static_cast<size_t>(max_rank) + (16 << 20));
  std::memset(read_buffer.data(), 0, read_buffer.size());

  std::vector<std::unique_ptr<ck::AsyncShardWriter>> async_writers;
  for (size_t r = 0; r < ranks.size(); ++r) {
    async_writers.push_back(std::make_unique<ck::AsyncShardWriter>());
  }
  std::vector<double> open_s, save, psave, load_warm, pload_warm, load_cold, pload_cold,
      reshard_warm, reshard_ranks, spread_save, spread_same, spread_other, blocked, async_total;
  int64_t reshard_bytes = 0, reshard_ranks_bytes = 0;
  for (int round = 0; round < rounds; ++round) {
    // Alternate which side writes first: the disk and the page cache carry state across them.
    if (round % 2 == 0) {
      spread_save.push_back(ntp_save(dir / "spread", round + 1, spread));
      psave.push_back(plain_write(dir / "plain", ranks));
      save.push_back(ntp_save(save_dir, round + 1, ranks));
    } else {
      save.push_back(ntp_save(save_dir, round + 1, ranks));
      psave.push_back(plain_write(dir / "plain", ranks));
      spread_save.push_back(ntp_save(dir / "spread", round + 1, spread));
    }
    pload_warm.push_back(plain_read(dir / "plain", ranks.size(), read_buffer));
    open_s.push_back(0.0);
    load_warm.push_back(ntp_load(save_dir, same, Pass::kPerRank, &open_s.back()));
    reshard_warm.push_back(ntp_load(save_dir, other, Pass::kAllRanks, nullptr, &reshard_bytes));
    reshard_ranks.push_back(
        ntp_load(save_dir, other, Pass::kPerRank, nullptr, &reshard_ranks_bytes));
    spread_same.push_back(ntp_load(dir / "spread", same_sorted, Pass::kPerRank));
    spread_other.push_back(ntp_load(dir / "spread", other, Pass::kAllRanks));
    evict(dir);
    pload_cold.push_back(plain_read(dir / "plain", ranks.size(), read_buffer));
    evict(dir);
    load_cold.push_back(ntp_load(save_dir, same, Pass::kPerRank));
    // Asynchronous save: each rank its own writer (kept across rounds, as a trainer keeps it, so
    // that from the second round on the snapshot reuses the previous one's memory).
    const fs::path async_dir = ck::prepare_step_dir(dir / "async", round + 1).value();
    double blocked_s = 0.0;
    const auto t = Clock::now();
    for (size_t r = 0; r < ranks.size(); ++r) {
      const auto t0 = Clock::now();
      auto snapshot = async_writers[r]->snapshot(ranks[r].views).value();
      blocked_s += seconds_since(t0);
      async_writers[r]->start(async_dir, std::to_string(r), std::move(snapshot));
    }
    for (size_t r = 0; r < ranks.size(); ++r) {
      if (auto rec = async_writers[r]->wait(); !rec.ok()) die(rec.status());
    }
    async_total.push_back(seconds_since(t));
    blocked.push_back(blocked_s);
    fs::remove_all(dir / "async");
  }
  const auto manifest_bytes = static_cast<int64_t>(
      fs::file_size(ck::latest_step_dir(save_dir).value() / ck::kManifestFile));
  if (!keep) fs::remove_all(dir);

  const double mb = static_cast<double>(bytes) / 1e6;
  std::printf("# checkpoint_bench: %s\n", ntp::bench::machine_description().c_str());
  std::printf("# crc32c: %s\n", ck::crc32c_hardware_available() ? "SSE4.2" : "portable");
  std::printf(
      "# GPT-2 %lld layers, width %lld, %lld params; %d writers; %.1f MB of state "
      "(value + exp_avg + exp_avg_sq); %d rounds, medians; dir %s\n",
      static_cast<long long>(layers), static_cast<long long>(width),
      static_cast<long long>(config.num_params()), writers, mb, rounds, dir.c_str());
  std::printf(
      "# reproduce: build/bench/checkpoint/checkpoint_bench --layers %lld --width %lld "
      "--writers %d --replicas %d --rounds %d\n",
      static_cast<long long>(layers), static_cast<long long>(width), writers, replicas, rounds);
  std::printf("%-36s %10s %10s %10s %8s\n", "operation", "ntp MB/s", "plain MB/s", "ntp s",
              "ratio");
  auto row = [&](const char* name, const std::vector<double>& ntp_s,
                 const std::vector<double>& plain_s) {
    const double a = median(ntp_s), b = median(plain_s);
    std::printf("%-36s %10.0f %10.0f %10.3f %8.2f\n", name, mb / a, mb / b, a, b / a);
  };
  row("save (fsync both)", save, psave);
  row("load, same layout, warm cache", load_warm, pload_warm);
  row("load, other layout, one pass, warm", reshard_warm, pload_warm);
  row("load, other layout, pass per rank", reshard_ranks, pload_warm);
  row("load, same layout, cold cache", load_cold, pload_cold);
  row("spread ckpt: load, same layout, warm", spread_same, pload_warm);
  row("spread ckpt: other layout, one pass", spread_other, pload_warm);
  std::printf(
      "other layout: %.2f x the state read from files in one pass, %.2f x in a pass per rank\n",
      static_cast<double>(reshard_bytes) / static_cast<double>(bytes),
      static_cast<double>(reshard_ranks_bytes) / static_cast<double>(bytes));
  std::printf(
      "spread save: %d replicas x %d ranks each write their share: %.3f s vs %.3f s for replica "
      "0's "
      "%d ranks alone (ratio %.2f); largest writer %.1f MB vs %.1f MB (%.2fx less: the save time "
      "of a job whose ranks write in parallel, each at its own bandwidth)\n",
      replicas, writers, median(spread_save), median(save), writers,
      median(save) / median(spread_save), static_cast<double>(spread_max) / 1e6,
      static_cast<double>(max_rank) / 1e6,
      static_cast<double>(max_rank) / static_cast<double>(spread_max));
  std::printf("open (manifest %lld bytes, headers): %.3f s of each load\n",
              static_cast<long long>(manifest_bytes), median(open_s));
  std::printf("async save: caller blocked %.3f s (snapshot copy) of %.3f s total = %.1f%%\n",
              median(blocked), median(async_total), 100.0 * median(blocked) / median(async_total));
  return 0;
}
