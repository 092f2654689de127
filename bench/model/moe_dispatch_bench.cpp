// The MoE layer's two expert dispatches side by side (model/expert_dispatch.h), on real processes
// over ntp's Gloo communicator (TCP over loopback):
//   allreduce  every rank routes all N tokens and runs its experts on those routed to them; one
//              all-reduce of the partial outputs forward, one of [dh | router gradient] backward
//              (what MoeModel does);
//   alltoall   each rank routes its N / P tokens; the (token, expert) pairs go to the experts'
//              holders and back by alltoallv, an all-gather rebuilds the output (MoeExchange).
// For each degree P of --degrees, P forked ranks each hold E / P experts (contiguous, the first
// E % P ranks one more) and run forward + backward of one block on the same N tokens, the two
// dispatches alternating for R rounds (one thread per rank). Printed per dispatch: the median
// over rounds of the slowest rank's time, the share of it the rank spent inside the group's
// collectives, and the floats the rank puts on the wire per forward + backward (ring all-reduce
// 2 (P - 1) / P of the data, all-gather (P - 1) / P of the gathered total, alltoallv what goes to
// other ranks), then the alltoall / allreduce time ratio.
//
//   build/bench/model/moe_dispatch_bench [--degrees 2,3,4] [--experts E] [--top-k K]
//       [--width C] [--ffn F] [--tokens N] [--rounds R]
//
// Defaults: 8 experts, top 2, width 256, expert width 512, 1024 tokens, 7 rounds. On a host
// with fewer cores than P the ranks share cores, and the times measure the scheduler too: the
// bench prints the core count next to each degree.
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <numeric>
#include <string>
#include <thread>
#include <vector>

#include "bench_flags.h"
#include "bench_timing.h"
#include "comm/gloo_communicator.h"
#include "comm/store.h"
#include "core/check.h"
#include "core/rng.h"
#include "forked_ranks.h"
#include "kernels/cpu/gemm.h"
#include "machine_info.h"
#include "model/comm_tp_group.h"
#include "model/moe_block.h"
#include "model/moe_exchange.h"

namespace {

using ntp::Status;
using ntp::model::MoeBlock;
using ntp::model::MoeConfig;
using ntp::model::MoeHolding;
using ntp::model::TpGroup;

struct Options {
  std::vector<int> degrees = {2, 3, 4};
  int experts = 8, top_k = 2, width = 256, ffn = 512, tokens = 1024, rounds = 7;
};

// A TpGroup that forwards to another and adds up the wall time spent in its collectives and the
// floats this rank puts on the wire (see the top of the file).
class TimedTpGroup final : public TpGroup {
 public:
  explicit TimedTpGroup(TpGroup& inner) : inner_(inner) {}
  int rank() const override { return inner_.rank(); }
  int size() const override { return inner_.size(); }
  Status all_reduce_sum(std::span<float> data) override {
    sent += 2.0 * static_cast<double>(data.size()) * (size() - 1) / size();
    return timed([&] { return inner_.all_reduce_sum(data); });
  }
  Status all_gather_v(std::span<const float> in, std::span<float> out,
                      std::span<const std::size_t> counts) override {
    sent += static_cast<double>(out.size()) * (size() - 1) / size();
    return timed([&] { return inner_.all_gather_v(in, out, counts); });
  }
  Status all_to_all_v(std::span<const float> in, std::span<const std::size_t> send_counts,
                      std::span<float> out, std::span<const std::size_t> recv_counts) override {
    for (size_t d = 0; d < send_counts.size(); ++d) {
      if (static_cast<int>(d) != rank()) sent += static_cast<double>(send_counts[d]);
    }
    return timed([&] { return inner_.all_to_all_v(in, send_counts, out, recv_counts); });
  }

  double seconds = 0.0, sent = 0.0;

 private:
  template <typename Fn>
  Status timed(Fn&& fn) {
    Status s;
    seconds += ntp::bench::seconds_of([&] { s = fn(); });
    return s;
  }
  TpGroup& inner_;
};

std::vector<MoeHolding> deal(int experts, int degree) {
  std::vector<MoeHolding> out(static_cast<size_t>(degree));
  int next = 0;
  for (int r = 0; r < degree; ++r) {
    for (int i = 0; i < experts / degree + (r < experts % degree ? 1 : 0); ++i) {
      out[static_cast<size_t>(r)].experts.push_back(next++);
    }
    out[static_cast<size_t>(r)].lead = r == 0;
  }
  return out;
}

std::vector<float> random_floats(uint64_t seed, size_t n, float scale) {
  ntp::Rng rng(seed);
  std::vector<float> v(n);
  for (float& x : v) x = scale * static_cast<float>(rng.normal());
  return v;
}

struct Figures {
  double step_s = 0, comm_s = 0, sent = 0;
};

// One round of one dispatch on this rank: forward + backward; the group's time and floats.
Figures run_allreduce(MoeBlock& block, TimedTpGroup& group, const Options& o,
                      const std::vector<float>& h, const std::vector<float>& dy) {
  const size_t nc = h.size(), ec = static_cast<size_t>(o.experts * o.width);
  std::vector<float> y(nc), reduce(nc + ec);
  group.seconds = group.sent = 0.0;
  Figures f;
  f.step_s = ntp::bench::seconds_of([&] {
    NTP_CHECK(block.forward(h, o.tokens, y).ok());
    NTP_CHECK(group.all_reduce_sum(y).ok());
    NTP_CHECK(block.backward(dy, 0.02, std::span<float>(reduce.data(), nc)).ok());
    const ntp::model::Param& gate = block.params()[0];
    std::copy_n(gate.grad.data(), ec, reduce.data() + nc);  // [dh | router gradient]
    NTP_CHECK(group.all_reduce_sum(reduce).ok());
  });
  f.comm_s = group.seconds, f.sent = group.sent;
  return f;
}

Figures run_alltoall(MoeBlock& block, ntp::model::MoeExchange& exchange, TimedTpGroup& group,
                     const Options& o, const std::vector<float>& h, const std::vector<float>& dy) {
  const size_t nc = h.size();
  std::vector<float> y(nc), dh(nc), router(static_cast<size_t>(o.experts * o.width));
  const std::vector<double> aux(static_cast<size_t>(o.experts), 0.0);
  ntp::model::RoutingStats stats;
  group.seconds = group.sent = 0.0;
  Figures f;
  f.step_s = ntp::bench::seconds_of([&] {
    NTP_CHECK(exchange.forward(block, h, o.tokens, y, stats).ok());
    NTP_CHECK(exchange.backward(block, dy, aux, dh, router.data()).ok());
  });
  f.comm_s = group.seconds, f.sent = group.sent;
  return f;
}

// The rank's medians over rounds, [allreduce step, comm, sent, alltoall step, comm, sent], then the
// maximum over ranks of each (on every rank).
std::vector<double> run_rank(int rank, int degree, const Options& o, const std::string& dir) {
  ntp::kernels::cpu::set_blas_threads(1);
  auto comm = ntp::bench::connect_rank(dir, "moe-dispatch", rank, degree);
  NTP_CHECK_MSG(comm.ok(), comm.status().to_string());
  ntp::model::CommTpGroup inner(**comm);
  TimedTpGroup group(inner);

  const MoeConfig config{.hidden = o.width, .ffn = o.ffn, .n_experts = o.experts, .top_k = o.top_k};
  const MoeHolding holding = deal(o.experts, degree)[static_cast<size_t>(rank)];
  MoeBlock reducing = MoeBlock::create(config, holding, 7).value();
  MoeBlock exchanging = MoeBlock::create(config, holding, 7).value();
  std::vector<int> holders;
  for (size_t r = 0; r < static_cast<size_t>(degree); ++r) {
    for (size_t i = 0; i < deal(o.experts, degree)[r].experts.size(); ++i) {
      holders.push_back(static_cast<int>(r));
    }
  }
  ntp::model::MoeExchange exchange(group, holders);
  const size_t nc = static_cast<size_t>(o.tokens * o.width);
  const std::vector<float> h = random_floats(11, nc, 1.0f), dy = random_floats(12, nc, 1e-3f);

  std::vector<std::vector<double>> per_round(6);
  for (int round = 0; round < o.rounds + 1; ++round) {  // round 0 warms up
    const Figures a = run_allreduce(reducing, group, o, h, dy);
    const Figures b = run_alltoall(exchanging, exchange, group, o, h, dy);
    if (round == 0) continue;
    const double figures[] = {a.step_s, a.comm_s, a.sent, b.step_s, b.comm_s, b.sent};
    for (size_t i = 0; i < 6; ++i) per_round[i].push_back(figures[i]);
  }
  std::vector<double> medians;
  for (const std::vector<double>& v : per_round) medians.push_back(ntp::bench::median(v));
  std::vector<double> all(medians.size() * static_cast<size_t>(degree));
  NTP_CHECK((*comm)
                ->allgather(ntp::comm::const_view(medians), ntp::comm::view(all),
                            std::vector<std::size_t>(static_cast<size_t>(degree), medians.size()))
                .ok());
  std::vector<double> worst(medians.size(), 0.0);
  for (size_t i = 0; i < all.size(); ++i) {
    worst[i % medians.size()] = std::max(worst[i % medians.size()], all[i]);
  }
  return worst;
}

void print_degree(int degree, const std::vector<double>& w, const Options& o) {
  const double data = static_cast<double>(o.tokens) * o.width;
  std::printf("P=%d (%u cores)\n", degree, std::thread::hardware_concurrency());
  const char* names[] = {"allreduce", "alltoall"};
  for (int d = 0; d < 2; ++d) {
    const double step = w[static_cast<size_t>(3 * d)], comm = w[static_cast<size_t>(3 * d + 1)];
    const double sent = w[static_cast<size_t>(3 * d + 2)];
    std::printf("  %-9s  step %8.2f ms   in collectives %5.1f%%   sent %6.3f x N C per fwd+bwd\n",
                names[d], 1e3 * step, 100.0 * comm / step, sent / data);
  }
  std::printf(
      "  alltoall / allreduce time: %.3f (model floats sent: allreduce %.3f, alltoall "
      "%.3f x N C)\n",
      w[3] / w[0], 4.0 * (degree - 1) / degree,
      2.0 * (degree - 1) / degree * (1.0 + 2.0 * o.top_k / degree));
}

}  // namespace

int main(int argc, char** argv) {
  const std::string program = "moe_dispatch_bench";
  Options o;
  ntp::bench::NumberListFlag degrees(o.degrees);
  ntp::bench::for_each_flag(
      program, argc, argv, [&](const std::string& flag, const std::string& v) {
        auto number = [&](long low, long high) {
          return static_cast<int>(ntp::bench::whole_number(program, flag, v, low, high));
        };
        if (flag == "--degrees")
          degrees.take(program, flag, v, 2, 64);
        else if (flag == "--experts")
          o.experts = number(1, 1024);
        else if (flag == "--top-k")
          o.top_k = number(1, 1024);
        else if (flag == "--width")
          o.width = number(1, 1 << 16);
        else if (flag == "--ffn")
          o.ffn = number(1, 1 << 16);
        else if (flag == "--tokens")
          o.tokens = number(1, 1 << 20);
        else if (flag == "--rounds")
          o.rounds = number(1, 1000);
        else
          ntp::bench::flag_error(program, "unknown flag " + flag);
      });
  if (o.top_k > o.experts) ntp::bench::flag_error(program, "--top-k must be <= --experts");
  for (int degree : o.degrees) {
    if (degree > o.experts) ntp::bench::flag_error(program, "each degree must be <= --experts");
  }
  ntp::bench::print_command_and_machine(program, argc, argv);
  std::printf(
      "# %d experts, top %d, width %d, expert width %d, %d tokens, %d rounds (median; the "
      "slowest rank's figure)\n",
      o.experts, o.top_k, o.width, o.ffn, o.tokens, o.rounds);
  for (int degree : o.degrees) {
    char pattern[] = "/tmp/ntp-moe-dispatch-XXXXXX";
    NTP_CHECK(mkdtemp(pattern) != nullptr);
    const std::string dir = pattern;
    int pipe_fds[2];
    NTP_CHECK(pipe(pipe_fds) == 0);
    std::fflush(nullptr);
    std::vector<pid_t> pids;
    for (int r = 0; r < degree; ++r) {
      const pid_t pid = fork();
      if (pid == 0) {
        const std::vector<double> worst = run_rank(r, degree, o, dir);
        if (r == 0) {
          const ssize_t bytes = static_cast<ssize_t>(worst.size() * sizeof(double));
          NTP_CHECK(write(pipe_fds[1], worst.data(), static_cast<size_t>(bytes)) == bytes);
        }
        _exit(0);
      }
      pids.push_back(pid);
    }
    close(pipe_fds[1]);
    std::vector<double> worst(6, 0.0);
    const ssize_t want = static_cast<ssize_t>(worst.size() * sizeof(double));
    const ssize_t got = read(pipe_fds[0], worst.data(), static_cast<size_t>(want));
    close(pipe_fds[0]);
    const int failed = ntp::bench::wait_for_ranks(pids);
    std::filesystem::remove_all(dir);
    if (failed > 0 || got != want) {
      std::fprintf(stderr, "%s: %d of %d ranks failed at degree %d\n", program.c_str(), failed,
                   degree, degree);
      return 1;
    }
    print_degree(degree, worst, o);
  }
  return 0;
}
