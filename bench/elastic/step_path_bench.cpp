// The per-step control path of a training step (issue 20, item 3), before and now, side by side
// in one run: N ranks (threads of one process, each with its own real Gloo pairs over loopback,
// formed through a file store; a world above GlooOptions::full_mesh_max_size is sparse, as a
// job's is) run the world collectives a step of `ntp train` runs besides its gradient sync.
//   before: the step-boundary broadcast of 3N+1 float64s from rank 0, the totals allreduce of
//           2N (one slot per rank), the figures allreduce of 6N
//   now:    the totals allreduce of 3 (sum of squares, loss, the leader's announce word: the
//           boundary costs nothing unless it is set), the figures gather of 6 per rank to rank 0
//   gloo:   the same two collectives with raw Gloo (gloo::allreduce, its default algorithm, and
//           gloo::gather) over a full mesh from gloo::rendezvous, what a user would pick instead;
//           up to kGlooMaxMembers ranks (a full mesh of threads in one process needs N(N-1)
//           sockets: 16,256 at 128, near this machine's descriptor limit), null above
// The store I/O the step path had (the leader's read of the join count, every worker's step
// report) is gone too; it is not timed here (docs/perf.md counts it).
//
// Each variant runs in blocks of --steps steps between barriers, ABCABC --rounds times; the
// figure is the median block's time per step on rank 0. One JSON line per N on stdout:
//   {"members":N,"before_s":..,"now_s":..,"gloo_s":..,"speedup":..,"now_over_gloo":..,
//    "before_payload_bytes":..,"now_payload_bytes":..}
// (payload: the float64s each rank puts into the step's collectives, times 8).
//
//   build/bench/elastic/step_path_bench --members 16,64,256 [--steps 50] [--rounds 5]
#include <unistd.h>

#include <algorithm>
#include <array>
#include <barrier>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include <gloo/allreduce.h>
#include <gloo/gather.h>
#include <gloo/math.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/file_store.h>
#include <gloo/transport/tcp/device.h>

#include "bench_flags.h"
#include "bench_timing.h"
#include "comm/communicator.h"
#include "comm/gloo_communicator.h"
#include "comm/store.h"
#include "machine_info.h"

namespace {

using ntp::comm::Communicator;
using ntp::comm::ConstView;
using ntp::comm::DType;
using ntp::comm::View;

struct Options {
  std::vector<int> members;
  int steps = 50;
  int rounds = 5;
};

using ntp::bench::median;

constexpr const char* kProgram = "step_path_bench";
constexpr int kGlooMaxMembers = 64;

[[noreturn]] void bad(const std::string& message) { ntp::bench::flag_error(kProgram, message); }

Options parse(int argc, char** argv) {
  Options o;
  ntp::bench::NumberListFlag members(o.members);
  ntp::bench::for_each_flag(
      kProgram, argc, argv, [&](const std::string& flag, const std::string& value) {
        if (flag == "--steps") {
          o.steps = static_cast<int>(ntp::bench::whole_number(kProgram, flag, value, 1, 100000));
        } else if (flag == "--members") {
          members.take(kProgram, flag, value, 2, 1024);
        } else if (flag == "--rounds") {
          o.rounds = static_cast<int>(ntp::bench::whole_number(kProgram, flag, value, 1, 1000));
        } else {
          bad("unknown flag '" + flag + "': use --members N[,N...], --steps, --rounds");
        }
      });
  if (o.members.empty()) bad("no --members given: e.g. --members 16,64,256");
  return o;
}

void check(const ntp::Status& s, const char* what) {
  if (!s.ok()) {
    std::fprintf(stderr, "step_path_bench: %s: %s\n", what, s.to_string().c_str());
    std::exit(1);
  }
}

// One step's control collectives as the trainer ran them before this change.
void step_before(Communicator& world) {
  const auto n = static_cast<size_t>(world.size());
  const auto r = static_cast<size_t>(world.rank());
  std::vector<double> boundary(3 * n + 1, 0.0), totals(2 * n, 0.0), figures(6 * n, 0.0);
  check(world.broadcast(ntp::comm::view(boundary), 0), "boundary broadcast");
  totals[2 * r] = 1.0;
  check(world.allreduce(ntp::comm::view(totals)), "totals allreduce");
  std::fill(figures.begin() + static_cast<long>(6 * r),
            figures.begin() + static_cast<long>(6 * r + 6), 1.0);
  check(world.allreduce(ntp::comm::view(figures)), "figures allreduce");
}

// ... and as it runs them now.
void step_now(Communicator& world) {
  std::array<double, 3> totals{1.0, 1.0, 0.0};
  check(world.allreduce(View{totals.data(), totals.size(), DType::kFloat64}), "totals allreduce");
  const std::array<double, 6> mine{1, 2, 3, 4, 5, 6};
  std::vector<double> figures(world.rank() == 0 ? 6 * static_cast<size_t>(world.size()) : 0);
  check(world.gather(ConstView{mine.data(), mine.size(), DType::kFloat64}, ntp::comm::view(figures),
                     0),
        "figures gather");
}

// ... and with raw Gloo.
void step_gloo(const std::shared_ptr<gloo::Context>& context) {
  std::array<double, 3> totals{1.0, 1.0, 0.0};
  gloo::AllreduceOptions reduce(context);
  reduce.setOutput(totals.data(), totals.size());
  reduce.setReduceFunction(
      static_cast<void (*)(void*, const void*, const void*, size_t)>(&gloo::sum<double>));
  gloo::allreduce(reduce);
  std::array<double, 6> mine{1, 2, 3, 4, 5, 6};
  std::vector<double> figures(context->rank == 0 ? 6 * static_cast<size_t>(context->size) : 0);
  gloo::GatherOptions gather(context);
  gather.setInput(mine.data(), mine.size());
  if (context->rank == 0) gather.setOutput(figures.data(), figures.size());
  gather.setRoot(0);
  gloo::gather(gather);
}

std::shared_ptr<gloo::Context> connect_raw_gloo(const std::filesystem::path& dir, int rank,
                                                int size) {
  gloo::transport::tcp::attr attr;
  attr.hostname = "127.0.0.1";
  std::shared_ptr<gloo::transport::Device> device = gloo::transport::tcp::CreateDevice(attr);
  gloo::rendezvous::FileStore store((dir / "gloo").string());
  auto context = std::make_shared<gloo::rendezvous::Context>(rank, size);
  context->connectFullMesh(store, device);
  return context;
}

void run_one(const Options& o, int n) {
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() /
      ("ntp-step-path-" + std::to_string(::getpid()) + "-" + std::to_string(n));
  std::filesystem::create_directories(dir / "gloo");
  const bool with_gloo = n <= kGlooMaxMembers;
  std::vector<double> before, now, gloo;  // rank 0's seconds per step, one per block
  std::vector<std::thread> ranks;
  std::barrier sync(n);
  for (int r = 0; r < n; ++r) {
    ranks.emplace_back([&, r] {
      ntp::Result<std::shared_ptr<ntp::comm::Store>> store =
          ntp::comm::open_store("file:" + dir.string(), "steps");
      check(store.status(), "store");
      ntp::comm::GlooOptions options;
      options.store = *store;
      options.rank = r;
      options.size = n;
      options.prefix = "world";
      ntp::Result<std::unique_ptr<Communicator>> world = ntp::comm::connect_gloo(options);
      check(world.status(), "connect");
      const std::shared_ptr<gloo::Context> raw = with_gloo ? connect_raw_gloo(dir, r, n) : nullptr;
      for (int round = 0; round < o.rounds + 1; ++round) {  // round 0 warms up
        for (std::vector<double>* variant : {&before, &now, &gloo}) {
          if (variant == &gloo && !raw) continue;
          check((*world)->barrier(), "barrier");
          const auto start = std::chrono::steady_clock::now();
          for (int s = 0; s < o.steps; ++s) {
            if (variant == &before) step_before(**world);
            if (variant == &now) step_now(**world);
            if (variant == &gloo) step_gloo(raw);
          }
          check((*world)->barrier(), "barrier");
          const double per_step =
              std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() /
              o.steps;
          if (r == 0 && round > 0) variant->push_back(per_step);
        }
      }
      sync.arrive_and_wait();  // no rank closes its pairs while another still uses them
    });
  }
  for (std::thread& t : ranks) t.join();
  std::filesystem::remove_all(dir);
  const double b = median(before), a = median(now);
  nlohmann::ordered_json line;
  line["members"] = n;
  line["before_s"] = b;
  line["now_s"] = a;
  line["gloo_s"] = with_gloo ? nlohmann::ordered_json(median(gloo)) : nullptr;
  line["speedup"] = std::round(100 * b / a) / 100;
  line["now_over_gloo"] =
      with_gloo ? nlohmann::ordered_json(std::round(100 * a / median(gloo)) / 100) : nullptr;
  line["before_payload_bytes"] = 8 * (3 * n + 1 + 2 * n + 6 * n);
  line["now_payload_bytes"] = 8 * (3 + 6);
  line["sparse"] = n > ntp::comm::GlooOptions{}.full_mesh_max_size;
  std::printf("%s\n", line.dump().c_str());
  std::fflush(stdout);
}

}  // namespace

int main(int argc, char** argv) {
  const Options o = parse(argc, argv);
  const std::string command = ntp::bench::command_line(kProgram, argc, argv);
  std::fprintf(
      stderr,
      "# %s\n# machine: %s\n# %d steps per block, %d rounds (before, now, gloo in turn), median\n",
      command.c_str(), ntp::bench::machine_description().c_str(), o.steps, o.rounds);
  for (int n : o.members) run_one(o, n);
  return 0;
}
