#include "random_cluster.h"

#include <algorithm>
#include <set>

#include "core/check.h"
#include "shard/fold_sync_strategy.h"
#include "shard/native_sync_strategy.h"

namespace ntp::shard::testing {
namespace {

constexpr std::int64_t kPrimes[] = {
    2,  3,  5,  7,  11, 13, 17,  19,  23,  29,  31,  37,  41,  43,  47,  53,   59,   61,   67,
    71, 73, 79, 83, 89, 97, 101, 103, 107, 109, 113, 127, 131, 257, 509, 1021, 4093, 65521};

std::int64_t random_units(Rng& rng, int at_least) {
  for (int attempt = 0; attempt < 64; ++attempt) {
    std::int64_t u = 0;
    if (rng.below(3) != 0) {
      u = kPrimes[rng.below(std::size(kPrimes))];
    } else {
      u = at_least +
          static_cast<std::int64_t>(rng.below(static_cast<std::uint64_t>(3 * at_least + 5)));
    }
    if (u >= at_least) return u;
  }
  return at_least;
}

}  // namespace

ClusterSpec random_cluster_spec(Rng& rng) {
  ClusterSpec spec;
  spec.domain_size = rng.below(10) == 0 ? 128 : 1 + static_cast<int>(rng.below(72));
  spec.domains = 1 + static_cast<int>(rng.below(12));
  spec.min_tp = 1 + static_cast<int>(rng.below(static_cast<std::uint64_t>(spec.domain_size)));
  // Up to 8 distinct degrees in [min_tp, domain_size], each domain picks one of them.
  const int distinct = 1 + static_cast<int>(rng.below(8));
  std::vector<int> degrees;
  for (int i = 0; i < distinct; ++i) {
    degrees.push_back(spec.min_tp + static_cast<int>(rng.below(static_cast<std::uint64_t>(
                                        spec.domain_size - spec.min_tp + 1))));
  }
  for (int d = 0; d < spec.domains; ++d) {
    const int degree = degrees[rng.below(degrees.size())];
    std::vector<int> slots(static_cast<std::size_t>(spec.domain_size));
    for (int l = 0; l < spec.domain_size; ++l) slots[static_cast<std::size_t>(l)] = l;
    for (int i = 0; i < spec.domain_size - degree; ++i) {  // partial Fisher-Yates
      const auto j =
          static_cast<std::size_t>(i) + rng.below(static_cast<std::uint64_t>(spec.domain_size - i));
      std::swap(slots[static_cast<std::size_t>(i)], slots[j]);
      spec.failed.push_back({d, slots[static_cast<std::size_t>(i)]});
    }
  }
  const ModelShape shape{.heads = random_units(rng, spec.domain_size),
                         .hidden = 0,
                         .ffn = 0,
                         .ffn_block = 1,
                         .vocab = rng.below(2) ? random_units(rng, spec.domain_size) : 0,
                         .layers = 1 + static_cast<std::int64_t>(rng.below(4))};
  ModelShape s = shape;
  s.hidden = s.heads * (1 + static_cast<std::int64_t>(rng.below(4)));
  s.ffn_block = 1 + static_cast<std::int64_t>(rng.below(3));
  s.ffn = random_units(rng, spec.domain_size) * s.ffn_block;
  NTP_CHECK(validate_model_shape(s).ok());
  spec.spaces = model_unit_spaces(s);
  NTP_CHECK_MSG(validate_cluster_spec(spec).ok(), describe(spec));
  return spec;
}

ClusterSpec fail_more(const ClusterSpec& spec, Rng& rng, int count) {
  ClusterSpec out = spec;
  for (int i = 0; i < count; ++i) {
    std::vector<SlotRef> candidates;
    for (int d = 0; d < out.domains; ++d) {
      if (out.degree(d) <= out.min_tp) continue;
      for (int l : out.healthy_slots(d)) candidates.push_back({d, l});
    }
    if (candidates.empty()) break;
    out.failed.push_back(candidates[rng.below(candidates.size())]);
    std::sort(out.failed.begin(), out.failed.end());
  }
  return out;
}

ClusterSpec repair_some(const ClusterSpec& spec, Rng& rng, int count) {
  ClusterSpec out = spec;
  for (int i = 0; i < count && !out.failed.empty(); ++i) {
    out.failed.erase(out.failed.begin() +
                     static_cast<std::ptrdiff_t>(rng.below(out.failed.size())));
  }
  return out;
}

ClusterSpec three_nvl72_with_one_at(int degree, const ModelShape& shape) {
  ClusterSpec spec;
  spec.domains = 3;
  spec.domain_size = 72;
  spec.spaces = model_unit_spaces(shape);
  for (int l = degree; l < 72; ++l) spec.failed.push_back({1, l});
  return spec;
}

std::vector<std::unique_ptr<SyncStrategy>> all_strategies(const ClusterSpec& spec) {
  std::vector<std::unique_ptr<SyncStrategy>> out;
  out.push_back(std::make_unique<FoldSyncStrategy>());
  out.push_back(std::make_unique<NativeSyncStrategy>(spec.domain_size));
  return out;
}

std::uint64_t fingerprint(const ClusterLayout& layout) {
  std::uint64_t h = 0x12345;
  auto mix = [&h](std::int64_t v) { h = splitmix64(h ^ static_cast<std::uint64_t>(v)); };
  auto mix_set = [&](const IntervalSet& s) {
    mix(static_cast<std::int64_t>(s.intervals().size()));
    for (const Interval& i : s.intervals()) {
      mix(i.begin);
      mix(i.end);
    }
  };
  for (const ReplicaLayout& r : layout.replicas) {
    mix(r.domain);
    for (int l : r.slots) mix(l);
    for (const auto& space : r.units) {
      for (const IntervalSet& s : space) mix_set(s);
    }
  }
  mix(layout.sync.sync_degree);
  for (const FoldTransfer& f : layout.sync.folds) {
    mix(f.space);
    mix(f.domain);
    mix(f.from_rank);
    mix(f.to_rank);
    mix_set(f.units);
  }
  for (const DpGroup& g : layout.sync.groups) {
    mix(g.space);
    mix(g.index);
    mix_set(g.units);
    for (const RankRef& m : g.members) {
      mix(m.domain);
      mix(m.rank);
    }
  }
  return h;
}

std::string describe(const ClusterSpec& spec) {
  std::string out = "domains=" + std::to_string(spec.domains) +
                    " size=" + std::to_string(spec.domain_size) +
                    " min_tp=" + std::to_string(spec.min_tp) + " degrees=[";
  for (int d = 0; d < spec.domains; ++d) out += std::to_string(spec.degree(d)) + " ";
  out += "] spaces=[";
  for (const UnitSpace& s : spec.spaces) out += s.name + ":" + std::to_string(s.units) + " ";
  return out + "]";
}

}  // namespace ntp::shard::testing
