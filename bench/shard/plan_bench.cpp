// Planning at scale: 100,000 GPUs in NVL72 domains with 1% of GPUs failed at random.
//
//   build/bench/shard/plan_bench [--domains 1389] [--fail-fraction 0.01] [--repeats 5] [--seed 1]
//
// Times, side by side in one run and for each sync strategy: the healthy layout, the degraded
// layout (slot-preserving, against the healthy one), the failure reshard plan, a repair layout and
// its reshard plan. Reports the median of --repeats runs of each phase, the failure path as a
// fraction of the 1 s budget, and what each strategy costs: state moved on failure, largest
// per-step fold and DP buffer of a rank.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "bench_timing.h"
#include "core/rng.h"
#include "machine_info.h"
#include "shard/cluster_layout.h"
#include "shard/fold_sync_strategy.h"
#include "shard/native_sync_strategy.h"
#include "shard/reshard_plan.h"

namespace {

using ntp::bench::median;
using ntp::bench::seconds_of;

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

  std::printf("machine: %s\n", ntp::bench::machine_description().c_str());
  std::printf(
      "config:  %d domains x 72 = %d GPUs, %d failed at random (seed %llu), 128 heads, "
      "FFN 65536 columns (1 per unit), vocab 128256, hidden 16384, 1 layer\n",
      domains, gpus, to_fail, static_cast<unsigned long long>(seed));
  std::printf(
      "command: build/bench/shard/plan_bench --domains %d --fail-fraction %g --repeats %d "
      "--seed %llu\n",
      domains, fail_fraction, repeats, static_cast<unsigned long long>(seed));
  std::printf("median of %d runs, ms:\n", repeats);
  std::printf("  %-8s %8s %9s %9s %8s %9s %9s %12s %12s %12s\n", "strategy", "healthy", "degraded",
              "reshard", "repair", "reshard2", "fail/1s", "moved(fail)", "max fold", "max DP");
  const FoldSyncStrategy fold;
  const NativeSyncStrategy native(spec.domain_size);
  for (const SyncStrategy* strategy :
       {static_cast<const SyncStrategy*>(&fold), static_cast<const SyncStrategy*>(&native)}) {
    std::vector<double> t_healthy, t_failed, t_reshard, t_repair, t_repair_reshard;
    std::int64_t moved = 0, max_fold = 0, max_dp = 0;
    for (int r = 0; r < repeats; ++r) {
      ClusterLayout healthy, degraded, back;
      ReshardPlan plan;
      t_healthy.push_back(seconds_of([&] { healthy = plan_cluster(spec, *strategy).value(); }));
      t_failed.push_back(
          seconds_of([&] { degraded = plan_cluster(failed, *strategy, &healthy).value(); }));
      t_reshard.push_back(seconds_of([&] { plan = plan_reshard(healthy, degraded).value(); }));
      t_repair.push_back(
          seconds_of([&] { back = plan_cluster(repaired, *strategy, &degraded).value(); }));
      t_repair_reshard.push_back(seconds_of([&] { (void)plan_reshard(degraded, back).value(); }));
      moved = plan.intra_domain_bytes + plan.dp_peer_bytes;
      for (const auto& replica : degraded.sync.costs) {
        for (const RankSyncCost& c : replica) {
          max_fold = std::max({max_fold, c.fold_out_bytes, c.fold_in_bytes});
          max_dp = std::max(max_dp, c.dp_bytes);
        }
      }
    }
    const double failure_path = median(t_failed) + median(t_reshard);
    std::printf("  %-8s %8.1f %9.1f %9.1f %8.1f %9.1f %9.3f %10.1f G %10.2f G %10.2f G\n",
                std::string(strategy->name()).c_str(), 1e3 * median(t_healthy),
                1e3 * median(t_failed), 1e3 * median(t_reshard), 1e3 * median(t_repair),
                1e3 * median(t_repair_reshard), failure_path / 1.0,
                static_cast<double>(moved) / 1e9, static_cast<double>(max_fold) / 1e9,
                static_cast<double>(max_dp) / 1e9);
  }
  std::printf(
      "columns: healthy/degraded/repair = layout time; reshard = failure reshard plan; reshard2 = "
      "repair reshard plan;\n  fail/1s = (degraded + reshard) / 1 s budget; moved(fail) = state "
      "bytes moved on failure (14 B/param);\n  max fold / max DP = largest per-step gradient "
      "bytes a rank folds / all-reduces (4 B/param)\n");
  return 0;
}
