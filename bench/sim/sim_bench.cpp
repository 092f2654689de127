// Simulator speed against the budgets, measured side by side in one run:
//   one 15-day trial of the 32,768-GPU paper setup under all six policies   < 0.5 s
//   one 365-day trial of 100,000 GPUs under all six policies                 < 5 s
// plus events per second (failures and repairs, warm-up included). Prints the machine, the
// configuration and the command that reproduces it.
//
//   build/bench/sim/sim_bench [repeats]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "machine_info.h"
#include "sim/config.h"
#include "sim/engine.h"

namespace {

struct Measure {
  double median_s = 0, min_s = 0;
  std::int64_t events = 0;
};

Measure measure(const ntp::sim::Simulator& sim, int repeats) {
  std::vector<double> times;
  Measure m;
  for (int i = 0; i < repeats; ++i) {
    const auto start = std::chrono::steady_clock::now();
    const ntp::sim::TrialResult r = sim.run_trial(i, false);
    times.push_back(
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
    m.events += r.events;
  }
  std::sort(times.begin(), times.end());
  m.median_s = times[times.size() / 2];
  m.min_s = times.front();
  m.events /= repeats;
  return m;
}

}  // namespace

int main(int argc, char** argv) {
  const int repeats = argc > 1 ? std::max(1, std::atoi(argv[1])) : 5;
  const std::string paper = std::string(NTP_SOURCE_DIR) + "/configs/sim/paper-b200-nvl32.toml";
  struct Case {
    const char* name;
    std::vector<std::string> overrides;
    double budget_s;
  };
  const std::vector<Case> cases = {
      {"32,768 GPUs x 15 days (paper setup, TP32 PP8)", {}, 0.5},
      {"100,000 GPUs x 365 days (paper model, TP32 PP1, 51.2M-token batch)",
       {"system.gpus=100000", "parallel.pp=1", "model.global_batch_tokens=51200000",
        "sim.days=365"},
       5.0},
  };
  std::printf("machine: %s, %u hardware threads\n", ntp::bench::cpu_model().c_str(),
              std::thread::hardware_concurrency());
  std::printf("command: build/bench/sim/sim_bench %d   (median of %d trials, 6 policies)\n\n",
              repeats, repeats);
  std::printf("%-68s %10s %10s %9s %10s %12s\n", "case", "median s", "budget s", "headroom",
              "events", "events/s");
  for (const Case& c : cases) {
    ntp::Result<ntp::sim::SimConfig> config = ntp::sim::load_config(paper, c.overrides);
    if (!config.ok()) {
      std::fprintf(stderr, "%s\n", config.status().to_string().c_str());
      return 1;
    }
    ntp::Result<ntp::sim::Simulator> sim = ntp::sim::Simulator::create(*config);
    if (!sim.ok()) return 1;
    const Measure m = measure(*sim, repeats);
    std::printf("%-68s %10.4f %10.1f %8.0fx %10lld %12.3g\n", c.name, m.median_s, c.budget_s,
                c.budget_s / m.median_s, static_cast<long long>(m.events),
                static_cast<double>(m.events) / m.median_s);
  }
  return 0;
}
