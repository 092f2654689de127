// MomentReshard with real processes over Gloo: ZeRO-1 moments held as owned chunks and as copies
// on the next DP member move to a new partition of the units, exactly (every element's value
// encodes its parameter, unit and position, so a misplaced or missing element shows), and a loss
// of an owner together with its copy is reported alike on every member, before anything moves.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "comm/gloo_communicator.h"
#include "comm/store.h"
#include "multiprocess.h"
#include "train/moment_reshard.h"

namespace ntp::train {
namespace {

using comm::testing::spawn_ranks;
using comm::testing::TempDir;
using comm::testing::wait_all;

constexpr int64_t kUnits = 17;  // a prime: partitions into 3 and 4 cut units unevenly
constexpr int64_t kInner = 3;

// Two parameters of shape [kUnits, kInner] (units along the rows).
std::vector<ParamGeometry> geometry() {
  return {ParamGeometry{1, kInner, kUnits, 0}, ParamGeometry{1, kInner, kUnits, 0}};
}

float exp_avg_at(int param, int64_t unit, int64_t e) {
  return static_cast<float>(1000 * param + 10 * unit + e);
}

// Units [begin, end) of a balanced partition of kUnits into `parts`, part `k`.
shard::IntervalSet part_of(int parts, int k) {
  return shard::IntervalSet::range(kUnits * k / parts, kUnits * (k + 1) / parts);
}

struct Chunk {
  BlockLayout layout;
  std::vector<float> m, v;
};

// Both parameters' `units` as one chunk; filled with their true moments when `fill`.
Chunk chunk_of(const shard::IntervalSet& units, bool fill) {
  Chunk c;
  const std::vector<ParamGeometry> g = geometry();
  for (int p = 0; p < 2; ++p) c.layout.add(p, units, g[static_cast<size_t>(p)]);
  c.m.assign(static_cast<size_t>(c.layout.size()), 0.0f);
  c.v = c.m;
  if (!fill) return c;
  for (const Block& b : c.layout.blocks()) {
    int64_t at = b.offset;
    for (int64_t u : b.units.ids()) {
      for (int64_t e = 0; e < kInner; ++e, ++at) {
        c.m[static_cast<size_t>(at)] = exp_avg_at(b.param, u, e);
        c.v[static_cast<size_t>(at)] = -exp_avg_at(b.param, u, e);
      }
    }
  }
  return c;
}

MomentChunk view_of(Chunk& c) { return {&c.layout, &c.m, &c.v}; }

// The old job had 4 owners of part k (k = 0..3), owner k holding a copy of part k-1. `lost` old
// members are gone; the new job's world is the others, in order, and partitions into 3 parts.
// Returns 0 when rank r received its new part exactly, 2 when plan() said kNotFound.
int run_rank(const std::string& dir, int r, const std::vector<int>& survivors) {
  auto store = comm::open_store("file:" + dir, "moments");
  CHILD_CHECK(store.ok(), r, "store");
  comm::GlooOptions options;
  options.store = *store;
  options.rank = r;
  options.size = static_cast<int>(survivors.size());
  options.timeout = std::chrono::milliseconds(20000);
  auto world = comm::connect_gloo(options);
  CHILD_CHECK(world.ok(), r, "connect: " + world.status().to_string());
  const int old_member = survivors[static_cast<size_t>(r)];
  Chunk owned = chunk_of(part_of(4, old_member), true);
  Chunk copy = chunk_of(part_of(4, (old_member + 3) % 4), true);
  Chunk needed = chunk_of(part_of(3, r), false);
  const HeldMoments held{{view_of(owned)}, {view_of(copy)}};
  Result<MomentReshard> plan =
      MomentReshard::plan(held, {view_of(needed)}, geometry(), {"w1", "w2"}, **world);
  if (!plan.ok()) {
    CHILD_CHECK(plan.status().code() == StatusCode::kNotFound, r, plan.status().to_string());
    return 2;
  }
  Result<int64_t> bytes = plan->run(**world);
  CHILD_CHECK(bytes.ok(), r, bytes.status().to_string());
  const Chunk want = chunk_of(part_of(3, r), true);
  CHILD_CHECK(needed.m == want.m && needed.v == want.v, r, "moments differ");
  return 0;
}

std::vector<int> exit_codes(const std::vector<int>& survivors) {
  TempDir dir;
  const int n = static_cast<int>(survivors.size());
  const std::vector<pid_t> pids =
      spawn_ranks(n, [&](int r) { return run_rank(dir.path(), r, survivors); });
  std::vector<int> codes;
  for (const comm::testing::ChildExit& e : wait_all(pids, std::chrono::seconds(60))) {
    EXPECT_FALSE(e.timed_out);
    codes.push_back(e.exited ? e.code : -1);
  }
  return codes;
}

// Old member 2 is lost: its part comes from member 3's copy, the rest from owners or locally.
TEST(MomentReshardTest, ALostOwnersMomentsComeFromItsCopy) {
  EXPECT_EQ(exit_codes({0, 1, 3}), (std::vector<int>{0, 0, 0}));
}

// Old members 1 and 2 are lost: part 1's copy was on member 2, so part 1 is gone everywhere.
TEST(MomentReshardTest, AnOwnerLostWithItsCopyIsReportedOnEveryMember) {
  EXPECT_EQ(exit_codes({0, 3}), (std::vector<int>{2, 2}));
}

}  // namespace
}  // namespace ntp::train
