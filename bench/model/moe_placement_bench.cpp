// Nonuniform expert parallelism, one rank at a time: what a replica's busiest rank pays when its
// group loses a rank and the experts are dealt over the survivors, measured side by side in one
// process on the MoE block's own kernels (model/moe_block.h).
//
//   build/bench/model/moe_placement_bench [--experts E] [--top-k K] [--width C] [--ffn F]
//       [--tokens N] [--degree T] [--skew S] [--rounds R]
//
// Defaults: 8 experts, top 2, width 512, expert width 1024, 2048 tokens, a healthy degree of 4
// (the degraded one is T - 1), no skew, 5 rounds. Every rank of a group computes the router for
// all tokens and its own experts' share (the layer's partial output, summed over the group by the
// TP all-reduce the attention block already has: no all-to-all in ntp's design, so none is
// timed). For each placement the bench times each rank's forward + backward of the block (median
// of R rounds, one thread) and prints the busiest rank's time; the degraded / healthy ratio is set
// against the expert counts' ratio (ceil(E / (T - 1)) / ceil(E / T)) and the perfectly divisible
// ideal T / (T - 1).
//
// Load: the router's measured choices (expert_counts over the N tokens) give each rank's routed
// tokens; a placement's imbalance is its busiest rank's load over the mean. `--skew S` scales
// router row e by 1 + S e / (E - 1), so that later experts win more often (a router that favours
// some experts, as trained ones do). Placements compared: the layout's contiguous deal (sizes as
// even as possible, what a count-balanced layout gives) and the trainer's deal by measured load
// (shard::deal_by_load: the heaviest expert first to the least-loaded rank), which a replica
// below its full degree now uses (docs/model.md, "Experts placed by measured load").
#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "bench_flags.h"
#include "bench_timing.h"
#include "core/check.h"
#include "core/rng.h"
#include "kernels/cpu/gemm.h"
#include "machine_info.h"
#include "model/moe_block.h"
#include "shard/load_layout.h"

namespace {

using ntp::model::MoeBlock;
using ntp::model::MoeConfig;
using ntp::model::MoeHolding;

struct Options {
  int experts = 8, top_k = 2, width = 512, ffn = 1024, tokens = 2048, degree = 4, rounds = 5;
  double skew = 0.0;
};

// Contiguous runs of experts, sizes as even as possible (the larger ones first).
std::vector<MoeHolding> deal_contiguous(int experts, int degree) {
  std::vector<MoeHolding> out(static_cast<size_t>(degree));
  int next = 0;
  for (int r = 0; r < degree; ++r) {
    const int size = experts / degree + (r < experts % degree ? 1 : 0);
    for (int i = 0; i < size; ++i) out[static_cast<size_t>(r)].experts.push_back(next++);
    out[static_cast<size_t>(r)].lead = r == 0;
  }
  return out;
}

// The trainer's placement by load (shard/load_layout.h) of the router's counts over `degree`
// ranks of equal speed: the heaviest expert first, each to the rank with the least load so far.
std::vector<MoeHolding> deal_by_load(const std::vector<int64_t>& counts, int degree) {
  const std::vector<double> loads(counts.begin(), counts.end());
  std::vector<MoeHolding> out;
  for (const ntp::shard::IntervalSet& units :
       ntp::shard::deal_by_load(loads, std::vector<double>(static_cast<size_t>(degree), 1.0))) {
    out.push_back({units.ids(), out.empty()});
  }
  return out;
}

// Busiest rank's routed tokens over the mean rank's (shard::load_imbalance at equal speeds).
double load_imbalance(const std::vector<MoeHolding>& placement,
                      const std::vector<int64_t>& counts) {
  std::vector<ntp::shard::IntervalSet> units;
  for (const MoeHolding& h : placement)
    units.push_back(ntp::shard::IntervalSet::from_ids(h.experts));
  return ntp::shard::load_imbalance(units, std::vector<double>(counts.begin(), counts.end()),
                                    std::vector<double>(placement.size(), 1.0));
}

// Scales router row e of the block's gate weight by 1 + skew e / (E - 1).
void skew_router(MoeBlock& block, const MoeConfig& c, double skew) {
  ntp::model::Param& gate = block.params()[0];
  for (int64_t e = 0; e < c.n_experts; ++e) {
    const double scale = 1.0 + skew * static_cast<double>(e) /
                                   static_cast<double>(std::max<int64_t>(1, c.n_experts - 1));
    for (int64_t j = 0; j < c.hidden; ++j) {
      gate.value[static_cast<size_t>(e * c.hidden + j)] *= static_cast<float>(scale);
    }
  }
}

struct Timed {
  double busiest_s = 0;
  std::vector<double> rank_s;
};

// Each rank's median forward + backward time over `rounds`; the blocks share the router weights
// (the same seed) and the inputs.
Timed time_placement(const MoeConfig& c, const std::vector<MoeHolding>& placement, const Options& o,
                     const std::vector<float>& h, const std::vector<float>& dy) {
  Timed t;
  const auto n = static_cast<size_t>(o.tokens * o.width);
  std::vector<float> y(n), dh(n);
  for (const MoeHolding& holding : placement) {
    ntp::Result<MoeBlock> block = MoeBlock::create(c, holding, 7);
    NTP_CHECK_MSG(block.ok(), block.status().to_string());
    skew_router(*block, c, o.skew);
    std::vector<double> rounds;
    for (int r = 0; r < o.rounds; ++r) {
      rounds.push_back(ntp::bench::seconds_of([&] {
        NTP_CHECK(block->forward(h, o.tokens, y).ok());
        NTP_CHECK(block->backward(dy, 0.02, dh).ok());
      }));
    }
    t.rank_s.push_back(ntp::bench::median(rounds));
  }
  t.busiest_s = *std::max_element(t.rank_s.begin(), t.rank_s.end());
  return t;
}

std::string sizes(const std::vector<MoeHolding>& placement) {
  std::string s;
  for (const MoeHolding& h : placement)
    s += (s.empty() ? "" : "/") + std::to_string(h.experts.size());
  return s;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string program = "moe_placement_bench";
  Options o;
  ntp::bench::for_each_flag(
      program, argc, argv, [&](const std::string& flag, const std::string& v) {
        auto number = [&](long low, long high) {
          return static_cast<int>(ntp::bench::whole_number(program, flag, v, low, high));
        };
        if (flag == "--experts")
          o.experts = number(2, 4096);
        else if (flag == "--top-k")
          o.top_k = number(1, 64);
        else if (flag == "--width")
          o.width = number(8, 1 << 16);
        else if (flag == "--ffn")
          o.ffn = number(8, 1 << 16);
        else if (flag == "--tokens")
          o.tokens = number(1, 1 << 20);
        else if (flag == "--degree")
          o.degree = number(2, 4096);
        else if (flag == "--rounds")
          o.rounds = number(1, 1000);
        else if (flag == "--skew")
          o.skew = static_cast<double>(number(0, 100));
        else
          ntp::bench::flag_error(program, flag + ": unknown flag (see the top of the source)");
      });
  if (o.top_k > o.experts || o.degree > o.experts) {
    ntp::bench::flag_error(program, "--top-k and --degree must not exceed --experts");
  }
  MoeConfig c;
  c.hidden = o.width;
  c.ffn = o.ffn;
  c.n_experts = o.experts;
  c.top_k = o.top_k;
  NTP_CHECK(ntp::kernels::cpu::set_blas_threads(1) == 1);  // one rank, one core
  std::printf("machine: %s\n", ntp::bench::machine_description().c_str());
  std::printf("command: %s\n", ntp::bench::command_line(program, argc, argv).c_str());
  std::printf(
      "MoE block: %d experts of %d columns, top %d, width %d, %d tokens, router skew %.0f, "
      "median of %d rounds, one thread\n\n",
      o.experts, o.ffn, o.top_k, o.width, o.tokens, o.skew, o.rounds);

  ntp::Rng rng(11);
  std::vector<float> h(static_cast<size_t>(o.tokens * o.width)), dy(h.size());
  for (float& x : h) x = static_cast<float>(rng.normal());
  for (float& x : dy) x = static_cast<float>(1e-3 * rng.normal());
  // The router's choices on these tokens (every rank computes the same).
  ntp::Result<MoeBlock> whole = MoeBlock::create(c, MoeHolding::all(c), 7);
  NTP_CHECK(whole.ok());
  skew_router(*whole, c, o.skew);
  std::vector<float> y(h.size());
  NTP_CHECK(whole->forward(h, o.tokens, y).ok());
  const std::vector<int64_t> counts = whole->expert_counts();

  const int healthy = o.degree, degraded = o.degree - 1;
  struct Row {
    std::string name;
    int degree;
    std::vector<MoeHolding> placement;
  };
  const std::vector<Row> rows = {
      {"healthy, contiguous", healthy, deal_contiguous(o.experts, healthy)},
      {"degraded, contiguous", degraded, deal_contiguous(o.experts, degraded)},
      {"degraded, by load", degraded, deal_by_load(counts, degraded)}};
  std::printf("%-22s %6s %10s %16s %14s\n", "placement", "degree", "experts", "busiest rank ms",
              "load imbalance");
  std::vector<double> busiest;
  for (const Row& r : rows) {
    const Timed t = time_placement(c, r.placement, o, h, dy);
    busiest.push_back(t.busiest_s);
    std::printf("%-22s %6d %10s %16.2f %14.3f\n", r.name.c_str(), r.degree,
                sizes(r.placement).c_str(), 1e3 * t.busiest_s, load_imbalance(r.placement, counts));
  }
  auto ceil_div = [](int a, int b) { return (a + b - 1) / b; };
  std::printf(
      "\ndegraded / healthy busiest rank: %.3f (contiguous), %.3f (by load); expert counts' "
      "ratio %.3f, ideal %.3f\n",
      busiest[1] / busiest[0], busiest[2] / busiest[0],
      static_cast<double>(ceil_div(o.experts, degraded)) / ceil_div(o.experts, healthy),
      static_cast<double>(healthy) / degraded);
  return 0;
}
