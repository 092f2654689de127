// The ZeRO-1 moment reshard's plan (train/moment_plan.h) at N members, against the scan it
// replaced (every need against every holding of its parameter: quadratic in N), side by side in
// one run, on the same descriptions: one lost member of a job whose every unit had one owner and
// a copy on the owner's next member (tests/common/moment_cases.h). What a member computes on
// the re-formation path after the descriptions' all-gather (not timed here: the gather moves
// O(N) descriptions to each member either way).
//
//   build/bench/train/moment_plan_bench [--members 64,256,1024,4096] [--params 8]
//       [--units-per-member 2] [--scan-max 2048] [--repeats 3]
//
// One JSON line per N: median seconds of each (the scan above --scan-max is not run), their
// ratio, the transfers and whether the two plans are equal.
#include <cstdio>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "bench_flags.h"
#include "bench_timing.h"
#include "machine_info.h"
#include "moment_cases.h"
#include "train/moment_plan.h"

namespace {

constexpr const char* kProgram = "moment_plan_bench";

struct Options {
  std::vector<int> members{64, 256, 1024, 4096};
  int params = 8, units_per_member = 2, scan_max = 2048, repeats = 3;
};

constexpr const char* kFlags =
    "--members N[,N...], --params, --units-per-member, --scan-max, --repeats";

Options parse(int argc, char** argv) {
  Options o;
  ntp::bench::NumberListFlag members(o.members);
  ntp::bench::for_each_flag(
      kProgram, argc, argv, [&](const std::string& flag, const std::string& value) {
        auto whole = [&](long low, long high) {
          return static_cast<int>(ntp::bench::whole_number(kProgram, flag, value, low, high));
        };
        if (flag == "--members") {
          members.take(kProgram, flag, value, 4, 131072);
        } else if (flag == "--params") {
          o.params = whole(1, 1024);
        } else if (flag == "--units-per-member") {
          o.units_per_member = whole(1, 64);
        } else if (flag == "--scan-max") {
          o.scan_max = whole(0, 131072);
        } else if (flag == "--repeats") {
          o.repeats = whole(1, 100);
        } else {
          ntp::bench::flag_error(kProgram, "unknown flag '" + flag + "': use " + kFlags);
        }
      });
  return o;
}

// The median of `repeats` timed calls of fn().
template <typename Fn>
double median_seconds(int repeats, Fn&& fn) {
  std::vector<double> runs;
  for (int k = 0; k < repeats; ++k) runs.push_back(ntp::bench::seconds_of(fn));
  return ntp::bench::median(std::move(runs));
}

}  // namespace

int main(int argc, char** argv) {
  const Options o = parse(argc, argv);
  ntp::bench::print_command_and_machine(kProgram, argc, argv);
  const std::vector<std::string> names = ntp::train::testing::param_names(o.params);
  bool all_equal = true;
  for (int n : o.members) {
    const auto items = ntp::train::testing::reshard_case(n, o.params, n * o.units_per_member,
                                                         /*scrambled=*/false, 1);
    std::vector<ntp::train::MomentTransfer> indexed;
    const double indexed_s = median_seconds(o.repeats, [&] {
      ntp::Result<std::vector<ntp::train::MomentTransfer>> plan =
          ntp::train::plan_moment_transfers(items, names);
      if (!plan.ok()) {
        std::fprintf(stderr, "%s: %s\n", kProgram, plan.status().to_string().c_str());
        std::exit(1);
      }
      indexed = std::move(*plan);
    });
    nlohmann::ordered_json line;
    line["members"] = n;
    line["params"] = o.params;
    line["units_per_param"] = n * o.units_per_member;
    line["transfers"] = indexed.size();
    line["indexed_s"] = indexed_s;
    line["scan_s"] = nullptr;
    if (n <= o.scan_max) {
      std::vector<ntp::train::MomentTransfer> scanned;
      const double scan_s = median_seconds(o.repeats, [&] {
        scanned.clear();
        (void)ntp::train::testing::plan_by_scan(items, o.params, scanned);
      });
      line["scan_s"] = scan_s;
      line["scan_over_indexed"] = scan_s / indexed_s;
      line["equal"] = scanned == indexed;
      all_equal = all_equal && scanned == indexed;
    }
    std::printf("%s\n", line.dump().c_str());
    std::fflush(stdout);
  }
  return all_equal ? 0 : 1;
}
