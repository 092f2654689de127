// nccl-tests style benchmark of ntp's Gloo Communicator against raw Gloo, side by side.
//
//   build/bench/comm/comm_bench [--ranks N] [--min-bytes B] [--max-bytes B] [--ms-per-size M]
//                               [--ops allreduce,allgather,alltoallv] [--control 1]
//
// N processes on this machine (loopback TCP) each open two full meshes: one through
// ntp::comm::connect_gloo (ntp's own algorithms on Gloo's transport, whose waits abort() can end:
// comm/gloo_collectives.h; plus the wrapper: argument checks, progress thread, Work handle, error
// mapping) and one raw gloo::rendezvous::Context on Gloo's own FileStore running Gloo's own
// algorithms (gloo::allreduce, gloo::allgatherv, gloo::alltoallv). For every size the two are
// timed in alternating blocks of the same iteration count, so both see the same machine noise.
// algbw = bytes / time; busbw = algbw * 2(n-1)/n for allreduce and (n-1)/n for allgather and
// alltoallv (the nccl-tests conventions). cpu = rank 0's process CPU time per operation (user +
// system, all threads) on each side, and their ratio gloo/ntp (> 1: ntp is cheaper). With --control
// 1 the "gloo" side runs ntp's algorithms too (directly on the raw mesh, no wrapper): the ratios
// then show the bench's own bias. `bytes` is the allreduce buffer, the gathered output, or each
// rank's alltoallv input (bytes/n to every rank). Rank 0 prints the table.
#include <gloo/allgatherv.h>
#include <gloo/allreduce.h>
#include <gloo/alltoallv.h>
#include <gloo/barrier.h>
#include <gloo/math.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/file_store.h>
#include <gloo/rendezvous/prefix_store.h>
#include <gloo/transport/tcp/device.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "comm/gloo_collectives.h"
#include "comm/gloo_communicator.h"
#include "comm/store.h"
#include "core/named_values.h"
#include "forked_ranks.h"
#include "machine_info.h"

namespace {

using Clock = std::chrono::steady_clock;

struct Config {
  int ranks = 2;
  std::size_t min_bytes = 4;
  std::size_t max_bytes = std::size_t{64} << 20;
  double ms_per_size = 400;  // budget per size and side
  std::string ops = "allreduce,allgather,alltoallv";
  // Control run: the "gloo" side runs ntp's algorithms (comm/gloo_collectives.h) directly on the
  // raw context, so the two sides differ only by the wrapper and which mesh they use.
  bool control = false;
};

std::string human(std::size_t bytes) {
  char text[32];
  if (bytes >= (1U << 20)) {
    std::snprintf(text, sizeof(text), "%zu MiB", bytes >> 20);
  } else if (bytes >= 1024) {
    std::snprintf(text, sizeof(text), "%zu KiB", bytes >> 10);
  } else {
    std::snprintf(text, sizeof(text), "%zu B", bytes);
  }
  return text;
}

double cpu_seconds() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  auto seconds = [](const timeval& t) {
    return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_usec) * 1e-6;
  };
  return seconds(usage.ru_utime) + seconds(usage.ru_stime);
}

enum class Op { kAllreduce, kAllgather, kAlltoallv };

const char* op_name(Op op) {
  static constexpr ntp::NamedValue<Op> kNames[] = {
      {Op::kAllreduce, "allreduce"}, {Op::kAllgather, "allgather"}, {Op::kAlltoallv, "alltoallv"}};
  return ntp::name_of(kNames, op);
}

// The wrapper's own cost per operation, free of network noise: a size-1 communicator runs the
// whole ntp path (checks, tag, exception guard, progress-thread bookkeeping) but no transfer.
void print_fixed_cost(const std::string& dir) {
  auto store = ntp::comm::open_store("file:" + dir + "/solo", "bench");
  ntp::comm::GlooOptions options;
  options.store = *store;
  options.prefix = "solo";
  auto solo = ntp::comm::connect_gloo(options);
  if (!solo.ok()) {
    std::fprintf(stderr, "fixed cost: %s\n", solo.status().to_string().c_str());
    return;
  }
  std::vector<float> one(1, 1.0F);
  constexpr int kCalls = 200000;
  auto time_ns = [&](bool async) {
    const auto t0 = Clock::now();
    for (int i = 0; i < kCalls; ++i) {
      ntp::Status s =
          async ? (*solo)->allreduce_async(ntp::comm::view(one), ntp::comm::ReduceOp::kSum)->wait()
                : (*solo)->allreduce(ntp::comm::view(one));
      if (!s.ok()) std::exit(1);
    }
    return std::chrono::duration<double, std::nano>(Clock::now() - t0).count() / kCalls;
  };
  const double sync_ns = time_ns(false);
  const double async_ns = time_ns(true);
  std::printf(
      "# wrapper fixed cost per operation (size-1 communicator, no transfer): "
      "%.0f ns synchronous, %.0f ns async+wait (progress-thread hand-off)\n",
      sync_ns, async_ns);
  std::fflush(stdout);
}

int run_rank(int rank, const Config& cfg, const std::string& dir) {
  const int n = cfg.ranks;
  auto comm_or = ntp::bench::connect_rank(dir + "/ntp", "bench", rank, n);
  if (!comm_or.ok()) {
    std::fprintf(stderr, "rank %d: %s\n", rank, comm_or.status().to_string().c_str());
    return 1;
  }
  ntp::comm::Communicator& comm = **comm_or;

  gloo::rendezvous::FileStore raw_store(dir + "/raw");
  gloo::transport::tcp::attr attr;
  attr.hostname = "127.0.0.1";
  auto device = gloo::transport::tcp::CreateDevice(attr);
  auto raw = std::make_shared<gloo::rendezvous::Context>(rank, n);
  raw->setTimeout(std::chrono::milliseconds(120000));
  raw->connectFullMesh(raw_store, device);
  std::uint32_t raw_tag = 0;
  std::vector<char> control_scratch;

  if (rank == 0) {
    std::printf(
        "# ntp comm benchmark: ntp::comm (ntp's abortable algorithms on Gloo's transport) vs raw "
        "Gloo (Gloo's own algorithms), side by side\n");
    std::printf("# machine: %s, %u hardware threads; transport: Gloo TCP over loopback\n",
                ntp::bench::cpu_model().c_str(), std::thread::hardware_concurrency());
    std::printf(
        "# ranks: %d processes; float32; time per operation = median over 12 alternating blocks "
        "per side\n",
        n);
    std::printf(
        "# reproduce: comm_bench --ranks %d --min-bytes %zu --max-bytes %zu "
        "--ms-per-size %.0f --ops %s%s\n",
        n, cfg.min_bytes, cfg.max_bytes, cfg.ms_per_size, cfg.ops.c_str(),
        cfg.control ? " --control 1 (CONTROL: both sides run ntp's algorithms)" : "");
    std::printf("%-10s %-10s %10s %12s %10s %10s %12s %10s %9s %9s %10s %10s %9s\n", "op", "size",
                "count", "ntp_us", "ntp_algbw", "ntp_busbw", "gloo_us", "gloo_busbw", "ratio",
                "ratio", "ntp_cpu", "gloo_cpu", "cpu");
    std::printf("%-10s %-10s %10s %12s %10s %10s %12s %10s %9s %9s %10s %10s %9s\n", "", "",
                "(elems)", "", "(GB/s)", "(GB/s)", "", "(GB/s)", "median", "best", "(us/op)",
                "(us/op)", "ratio");
  }

  for (Op op : {Op::kAllreduce, Op::kAllgather, Op::kAlltoallv}) {
    if (cfg.ops.find(op_name(op)) == std::string::npos) continue;
    for (std::size_t bytes = cfg.min_bytes; bytes <= cfg.max_bytes; bytes *= 4) {
      const std::size_t count = std::max<std::size_t>(bytes / sizeof(float), 1);
      // allgather: `bytes` is the gathered output size, each rank contributes count/n (>= 1);
      // alltoallv: `bytes` is each rank's input, count/n (>= 1) elements to every rank.
      const std::size_t share = std::max<std::size_t>(count / static_cast<std::size_t>(n), 1);
      const std::size_t out_count =
          op == Op::kAllreduce ? count : share * static_cast<std::size_t>(n);
      std::vector<float> a(out_count, 1.0F);
      std::vector<float> in(op == Op::kAlltoallv ? out_count : share, 1.0F);
      std::vector<std::size_t> counts(static_cast<std::size_t>(n), share);
      std::vector<std::size_t> byte_counts(static_cast<std::size_t>(n), share * sizeof(float));
      std::vector<std::int64_t> element_counts(static_cast<std::size_t>(n),
                                               static_cast<std::int64_t>(share));

      auto ntp_once = [&] {
        ntp::Status s;
        if (op == Op::kAllreduce) {
          s = comm.allreduce(ntp::comm::view(a));
        } else if (op == Op::kAllgather) {
          s = comm.allgather(ntp::comm::const_view(in), ntp::comm::view(a), counts);
        } else {
          s = comm.alltoallv(ntp::comm::const_view(in), counts, ntp::comm::view(a), counts);
        }
        if (!s.ok()) {
          std::fprintf(stderr, "rank %d: %s\n", rank, s.to_string().c_str());
          std::exit(1);
        }
      };
      auto raw_once = [&] {
        if (cfg.control) {
          ntp::comm::gloo_ops::InFlight in_flight;
          ntp::comm::gloo_ops::Net net;
          net.context = raw;
          net.in_flight = &in_flight;
          net.timeout = std::chrono::milliseconds(120000);
          net.scratch = &control_scratch;
          net.rank = rank;
          net.size = n;
          const std::uint64_t slot = gloo::Slot::build(0x72, raw_tag++);
          ntp::Status s;
          if (op == Op::kAllreduce) {
            s = ntp::comm::gloo_ops::allreduce(
                net, a.data(), a.size(), sizeof(float),
                ntp::comm::gloo_ops::sum_into(ntp::comm::DType::kFloat32), slot);
          } else if (op == Op::kAllgather) {
            std::memcpy(a.data() + static_cast<std::size_t>(rank) * share, in.data(),
                        share * sizeof(float));
            s = ntp::comm::gloo_ops::allgather(net, a.data(), counts, sizeof(float), slot);
          } else {
            s = ntp::comm::gloo_ops::alltoallv(net, in.data(), byte_counts, a.data(), byte_counts,
                                               slot);
          }
          if (!s.ok()) std::exit(1);
          return;
        }
        if (op == Op::kAllreduce) {
          gloo::AllreduceOptions o(raw);
          o.setOutput(a.data(), a.size());
          o.setReduceFunction(static_cast<void (*)(void*, const void*, const void*, std::size_t)>(
              &gloo::sum<float>));
          o.setTag(raw_tag++);
          gloo::allreduce(o);
        } else if (op == Op::kAllgather) {
          gloo::AllgathervOptions o(raw);
          o.setInput(reinterpret_cast<std::uint8_t*>(in.data()), share * sizeof(float));
          o.setOutput(reinterpret_cast<std::uint8_t*>(a.data()), byte_counts);
          o.setTag(raw_tag++);
          gloo::allgatherv(o);
        } else {
          gloo::AlltoallvOptions o(raw);
          o.setInput(in.data(), element_counts);
          o.setOutput(a.data(), element_counts);
          o.setTag(raw_tag++);
          gloo::alltoallv(o);
        }
      };
      auto raw_barrier = [&] {
        gloo::BarrierOptions o(raw);
        o.setTag(raw_tag++);
        gloo::barrier(o);
      };
      // Warm up both, and let rank 0 pick an iteration count that fits the time budget; all
      // ranks learn it by broadcast.
      ntp_once();
      raw_once();
      std::vector<std::int64_t> iters_v{1};
      if (rank == 0) {
        const auto t0 = Clock::now();
        ntp_once();
        const double once_ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
        iters_v[0] = std::clamp<std::int64_t>(
            static_cast<std::int64_t>(cfg.ms_per_size / 12 / std::max(once_ms, 1e-3)), 3, 2000);
      } else {
        ntp_once();
      }
      if (!comm.broadcast(ntp::comm::view(iters_v), 0).ok()) return 1;
      const std::int64_t iters = iters_v[0];
      // 2 * kBlocks alternating blocks (ABBA BAAB ...) so drift and neighbours' load hit both
      // sides alike; each side's time is the median of its block means.
      constexpr int kBlocks = 12;
      std::vector<double> ntp_blocks;
      std::vector<double> raw_blocks;
      // CPU time of this process (all its threads, Gloo's I/O threads included) per side: unlike
      // wall time it hardly moves with other jobs' load, so it compares the algorithms' cost.
      double ntp_cpu = 0;
      double raw_cpu = 0;
      for (int block = 0; block < kBlocks; ++block) {
        for (int side = 0; side < 2; ++side) {
          const bool ntp_side = (block + side) % 2 == 0;
          raw_barrier();
          const double c0 = cpu_seconds();
          const auto t0 = Clock::now();
          for (std::int64_t i = 0; i < iters; ++i) ntp_side ? ntp_once() : raw_once();
          const double s = std::chrono::duration<double>(Clock::now() - t0).count();
          (ntp_side ? ntp_cpu : raw_cpu) += cpu_seconds() - c0;
          (ntp_side ? ntp_blocks : raw_blocks).push_back(s / static_cast<double>(iters));
        }
      }
      const double ops_per_side = static_cast<double>(kBlocks * iters);
      auto median = [](std::vector<double> v) {
        std::sort(v.begin(), v.end());
        return (v[v.size() / 2 - 1] + v[v.size() / 2]) / 2;
      };
      if (rank == 0) {
        const double ntp_t = median(ntp_blocks);
        const double raw_t = median(raw_blocks);
        const double moved = static_cast<double>(out_count * sizeof(float));
        const double factor = op == Op::kAllreduce ? 2.0 * (n - 1) / n : 1.0 * (n - 1) / n;
        const double ntp_alg = moved / ntp_t / 1e9;
        const double ntp_bus = ntp_alg * factor;
        const double raw_bus = moved / raw_t / 1e9 * factor;
        // Noise on a shared machine only adds time, so the fastest blocks bound the intrinsic
        // difference more tightly than the medians do; both ratios are printed.
        const double ntp_best = *std::min_element(ntp_blocks.begin(), ntp_blocks.end());
        const double raw_best = *std::min_element(raw_blocks.begin(), raw_blocks.end());
        std::printf(
            "%-10s %-10s %10zu %12.1f %10.3f %10.3f %12.1f %10.3f %9.3f %9.3f %10.1f %10.1f "
            "%9.3f\n",
            op_name(op), human(bytes).c_str(), out_count, ntp_t * 1e6, ntp_alg, ntp_bus,
            raw_t * 1e6, raw_bus, ntp_bus / raw_bus, raw_best / ntp_best,
            ntp_cpu / ops_per_side * 1e6, raw_cpu / ops_per_side * 1e6, raw_cpu / ntp_cpu);
        std::fflush(stdout);
      }
    }
  }
  if (rank == 0) print_fixed_cost(dir);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Config cfg;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    const std::string value = argv[i + 1];
    if (flag == "--ranks") {
      cfg.ranks = std::stoi(value);
    } else if (flag == "--min-bytes") {
      cfg.min_bytes = std::stoull(value);
    } else if (flag == "--max-bytes") {
      cfg.max_bytes = std::stoull(value);
    } else if (flag == "--ms-per-size") {
      cfg.ms_per_size = std::stod(value);
    } else if (flag == "--ops") {
      cfg.ops = value;
    } else if (flag == "--control") {
      cfg.control = value == "1";
    } else {
      std::fprintf(stderr, "comm_bench: unknown flag %s\n", flag.c_str());
      return 2;
    }
  }
  if (cfg.ranks < 2 || cfg.min_bytes < 4 || cfg.max_bytes < cfg.min_bytes) {
    std::fprintf(stderr, "comm_bench: need --ranks >= 2 and 4 <= --min-bytes <= --max-bytes\n");
    return 2;
  }
  char pattern[] = "/tmp/ntp-comm-bench-XXXXXX";
  if (mkdtemp(pattern) == nullptr) return 1;
  const std::string dir = pattern;
  std::filesystem::create_directories(dir + "/raw");
  std::fflush(nullptr);
  std::vector<pid_t> pids;
  for (int r = 0; r < cfg.ranks; ++r) {
    const pid_t pid = fork();
    if (pid == 0) _exit(run_rank(r, cfg, dir));
    pids.push_back(pid);
  }
  const int failed = ntp::bench::wait_for_ranks(pids);
  std::filesystem::remove_all(dir);
  return failed == 0 ? 0 : 1;
}
