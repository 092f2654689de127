// Planning at scale: 100,000 GPUs in NVL72 domains with 1% of GPUs failed at random.
//
//   build/bench/shard/plan_bench [--domains 1389] [--fail-fraction 0.01] [--repeats 5] [--seed 1]
//
// Times, side by side in one run: the healthy layout, the degraded layout (slot-preserving, against
// the healthy one), the failure reshard plan, a repair layout and its reshard plan. Reports the
// median of --repeats runs of each phase and the total as a fraction of the 1 s budget.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "core/rng.h"
#include "machine_info.h"
#include "shard/cluster_layout.h"
#include "shard/fold_sync_strategy.h"
#include "shard/reshard_plan.h"

namespace {

using Clock = std::chrono::steady_clock;

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

template <typename Fn>
double seconds_of(Fn&& fn) {
  const auto start = Clock::now();
  fn();
  return std::chrono::duration<double>(Clock::now() - start).count();
}

}  // namespace

int main(int argc, char** argv) {
  int domains = 1389;  // 1389 x 72 = 100,008 GPUs
  double fail_fraction = 0.01;
  int repeats = 5;
  std::uint64_t seed = 1;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--domains"))
      domains = std::atoi(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--fail-fraction"))
      fail_fraction = std::atof(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--repeats"))
      repeats = std::atoi(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--seed"))
      seed = std::strtoull(argv[i + 1], nullptr, 10);
    else {
      std::fprintf(stderr, "unknown flag %s\n", argv[i]);
      return 2;
    }
  }
  using namespace ntp::shard;
  ClusterSpec spec;
  spec.domains = domains;
  spec.domain_size = 72;
  spec.min_tp = 1;
  spec.spaces = model_unit_spaces(
      {.heads = 128, .hidden = 16384, .ffn = 65536, .ffn_block = 1, .vocab = 128256, .layers = 1});
  ntp::Rng rng(seed);
  ClusterSpec failed = spec;
  const int gpus = domains * spec.domain_size;
  const int to_fail = static_cast<int>(fail_fraction * gpus);
  while (static_cast<int>(failed.failed.size()) < to_fail) {
    const SlotRef s{static_cast<int>(rng.below(static_cast<std::uint64_t>(domains))),
                    static_cast<int>(rng.below(72))};
    if (std::find(failed.failed.begin(), failed.failed.end(), s) == failed.failed.end()) {
      failed.failed.push_back(s);
    }
  }
  ClusterSpec repaired = failed;
  repaired.failed.erase(repaired.failed.begin());

  const FoldSyncStrategy strategy;
  std::vector<double> t_healthy, t_failed, t_reshard, t_repair, t_repair_reshard;
  std::size_t transfers = 0;
  int sync_degree = 0;
  for (int r = 0; r < repeats; ++r) {
    ClusterLayout healthy, degraded, back;
    t_healthy.push_back(seconds_of([&] { healthy = plan_cluster(spec, strategy).value(); }));
    t_failed.push_back(
        seconds_of([&] { degraded = plan_cluster(failed, strategy, &healthy).value(); }));
    t_reshard.push_back(
        seconds_of([&] { transfers = plan_reshard(healthy, degraded).value().transfers.size(); }));
    t_repair.push_back(
        seconds_of([&] { back = plan_cluster(repaired, strategy, &degraded).value(); }));
    t_repair_reshard.push_back(seconds_of([&] { (void)plan_reshard(degraded, back).value(); }));
    sync_degree = degraded.sync.sync_degree;
  }
  const double failure_path = median(t_failed) + median(t_reshard);
  std::printf("machine: %s\n", ntp::bench::machine_description().c_str());
  std::printf(
      "config:  %d domains x 72 = %d GPUs, %d failed at random (seed %llu), 128 heads, "
      "FFN 65536 columns (1 per unit), vocab 128256; sync degree after failures %d\n",
      domains, gpus, to_fail, static_cast<unsigned long long>(seed), sync_degree);
  std::printf(
      "command: build/bench/shard/plan_bench --domains %d --fail-fraction %g --repeats %d "
      "--seed %llu\n",
      domains, fail_fraction, repeats, static_cast<unsigned long long>(seed));
  std::printf("median of %d runs:\n", repeats);
  std::printf("  healthy layout            %8.1f ms\n", 1e3 * median(t_healthy));
  std::printf("  degraded layout           %8.1f ms\n", 1e3 * median(t_failed));
  std::printf("  failure reshard plan      %8.1f ms  (%zu transfers)\n", 1e3 * median(t_reshard),
              transfers);
  std::printf("  repair layout             %8.1f ms\n", 1e3 * median(t_repair));
  std::printf("  repair reshard plan       %8.1f ms\n", 1e3 * median(t_repair_reshard));
  std::printf("  failure path (layout + reshard) %.1f ms = %.3f of the 1 s budget\n",
              1e3 * failure_path, failure_path / 1.0);
  return 0;
}
