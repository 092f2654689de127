#include "cli/plan_report.h"

#include <algorithm>
#include <cstdarg>
#include <cstdio>
#include <map>

#include "core/units.h"
#include "shard/load_layout.h"

namespace ntp::cli {
namespace {

using shard::ClusterLayout;
using shard::IntervalSet;
using shard::ReplicaLayout;
using shard::ReshardPlan;

// printf appended to a std::string, of any length.
void appendf(std::string& out, const char* format, ...) __attribute__((format(printf, 2, 3)));
void appendf(std::string& out, const char* format, ...) {
  va_list args;
  va_start(args, format);
  va_list again;
  va_copy(again, args);
  const int n = std::vsnprintf(nullptr, 0, format, args);
  va_end(args);
  if (n > 0) {
    const std::size_t old_size = out.size();
    out.resize(old_size + static_cast<std::size_t>(n) + 1);
    std::vsnprintf(out.data() + old_size, static_cast<std::size_t>(n) + 1, format, again);
    out.resize(old_size + static_cast<std::size_t>(n));
  }
  va_end(again);
}

std::string ints_to_ranges(const std::vector<int>& values) {
  std::vector<std::int64_t> ids(values.begin(), values.end());
  return IntervalSet::from_ids(std::move(ids)).to_string();
}

std::pair<std::int64_t, std::int64_t> unit_count_range(const ReplicaLayout& r, std::size_t sp) {
  std::int64_t lo = INT64_MAX, hi = 0;
  for (const IntervalSet& s : r.units[sp]) {
    lo = std::min(lo, s.count());
    hi = std::max(hi, s.count());
  }
  return {lo, hi};
}

std::string count_range(std::pair<std::int64_t, std::int64_t> r) {
  return r.first == r.second ? std::to_string(r.first)
                             : std::to_string(r.first) + "-" + std::to_string(r.second);
}

std::string slot_name(shard::SlotRef s) {
  return std::to_string(s.domain) + ":" + std::to_string(s.slot);
}

void render_replicas(std::string& out, const ClusterLayout& layout, bool details) {
  const auto& spec = layout.spec;
  appendf(out, "  %-22s %4s  %-24s", "domains", "TP", "active slots");
  for (const auto& space : spec.spaces) appendf(out, " %12s", (space.name + "/rank").c_str());
  appendf(out, "  imbalance (max/ideal)\n");
  // Healthy replicas are identical: one line for all of them unless --details.
  std::vector<int> healthy;
  for (const ReplicaLayout& r : layout.replicas) {
    if (r.degree() == spec.domain_size && !details) healthy.push_back(r.domain);
  }
  auto row = [&](const std::string& domains, const ReplicaLayout& r) {
    if (r.degree() == 0) {  // all its slots failed: the other replicas take its samples
      appendf(out, "  %-22s %4d  left the job: every slot failed\n", domains.c_str(), 0);
      return;
    }
    appendf(out, "  %-22s %4d  %-24s", domains.c_str(), r.degree(),
            r.degree() == spec.domain_size ? "all" : ints_to_ranges(r.slots).c_str());
    for (std::size_t sp = 0; sp < spec.spaces.size(); ++sp) {
      appendf(out, " %12s", count_range(unit_count_range(r, sp)).c_str());
    }
    out += " ";
    for (std::size_t sp = 0; sp < spec.spaces.size(); ++sp) {
      appendf(out, " %s %.3f", spec.spaces[sp].name.c_str(), r.imbalance(static_cast<int>(sp)));
    }
    for (std::size_t sp = 0; sp < spec.spaces.size(); ++sp) {  // measured loads: busiest / mean
      if (!spec.has_loads(static_cast<int>(sp))) continue;
      appendf(
          out, "; %s by load %.3f", spec.spaces[sp].name.c_str(),
          shard::load_imbalance(r.units[sp], spec.unit_loads[sp],
                                std::vector<double>(static_cast<std::size_t>(r.degree()), 1.0)));
    }
    out += "\n";
    if (!details) return;
    for (int k = 0; k < r.degree(); ++k) {
      appendf(out, "      rank %d on slot %d:", k, r.slots[static_cast<std::size_t>(k)]);
      for (std::size_t sp = 0; sp < spec.spaces.size(); ++sp) {
        appendf(out, " %s %s", spec.spaces[sp].name.c_str(),
                r.units[sp][static_cast<std::size_t>(k)].to_string().c_str());
      }
      out += "\n";
    }
  };
  if (!healthy.empty())
    row(ints_to_ranges(healthy), layout.replicas[static_cast<std::size_t>(healthy[0])]);
  for (const ReplicaLayout& r : layout.replicas) {
    if (r.degree() != spec.domain_size || details) row(std::to_string(r.domain), r);
  }
}

void render_sync(std::string& out, const ClusterLayout& layout, bool details) {
  const auto& spec = layout.spec;
  const auto& sync = layout.sync;
  if (sync.strategy == "fold") {
    appendf(out,
            "\nsync plan (fold): sync degree %d. Core ranks 0-%d of every replica all-reduce the "
            "same %d\npartitions of each space; extra ranks fold their gradients into core ranks "
            "first and\nget the reduced values back after (unfold).\n",
            sync.sync_degree, sync.sync_degree - 1, sync.sync_degree);
  } else {
    appendf(out,
            "\nsync plan (%s): %d partitions per space. In each replica one rank represents each "
            "partition;\nthe other ranks fold their pieces of it into that rank before the DP "
            "all-reduce.\n",
            sync.strategy.c_str(), sync.sync_degree);
  }
  // One line per degree: all replicas of a degree have the same costs.
  std::map<int, std::vector<int>, std::greater<>> by_degree;
  int active = 0;  // replicas in the job (a domain that left has no rank in any group)
  for (const ReplicaLayout& r : layout.replicas) {
    if (r.degree() == 0) continue;
    by_degree[r.degree()].push_back(r.domain);
    ++active;
  }
  appendf(out, "  %4s %9s %6s %16s %18s %18s\n", "TP", "replicas", "folds", "fold/replica",
          "max fold/rank", "max DP/rank");
  std::int64_t max_dp = 0;
  for (const auto& [degree, domains] : by_degree) {
    const auto& costs = sync.costs[static_cast<std::size_t>(domains.front())];
    std::int64_t fold = 0, max_fold = 0, dp = 0;
    for (const auto& c : costs) {
      fold += c.fold_out_bytes;
      max_fold = std::max({max_fold, c.fold_out_bytes, c.fold_in_bytes});
      dp = std::max(dp, c.dp_bytes);
    }
    max_dp = std::max(max_dp, dp);
    int folding_ranks = 0;
    for (const auto& c : costs) folding_ranks += c.fold_out_bytes > 0 ? 1 : 0;
    appendf(out, "  %4d %9zu %6d %16s %18s %18s\n", degree, domains.size(), folding_ranks,
            format_bytes(static_cast<double>(fold)).c_str(),
            format_bytes(static_cast<double>(max_fold)).c_str(),
            format_bytes(static_cast<double>(dp)).c_str());
  }
  std::int64_t uniform_dp = 0;  // the same cluster with every replica at full degree
  for (const auto& space : spec.spaces) {
    uniform_dp += (space.units + spec.domain_size - 1) / spec.domain_size * space.params_per_unit *
                  spec.bytes.grad_bytes;
  }
  appendf(out,
          "  largest DP all-reduce buffer of a rank: %s (%s with every replica at TP%d, %+.1f%%)\n",
          format_bytes(static_cast<double>(max_dp)).c_str(),
          format_bytes(static_cast<double>(uniform_dp)).c_str(), spec.domain_size,
          100.0 * (static_cast<double>(max_dp) / static_cast<double>(uniform_dp) - 1.0));
  appendf(out, "  %zu DP groups of %d members, %zu fold transfers per step\n", sync.groups.size(),
          active, sync.folds.size());
  if (!details) return;
  for (const auto& f : sync.folds) {
    appendf(out, "    fold %s domain %d: rank %d -> rank %d units %s\n",
            spec.spaces[static_cast<std::size_t>(f.space)].name.c_str(), f.domain, f.from_rank,
            f.to_rank, f.units.to_string().c_str());
  }
}

void render_reshard(std::string& out, const char* title, const ClusterLayout& to,
                    const ReshardPlan& plan, bool details) {
  const double total =
      static_cast<double>(plan.kept_bytes + plan.intra_domain_bytes + plan.dp_peer_bytes);
  appendf(out,
          "\nreshard on %s: %zu transfers; within domains %s, from DP peers %s; kept in place "
          "%.1f%%; most into one GPU %s\n",
          title, plan.transfers.size(),
          format_bytes(static_cast<double>(plan.intra_domain_bytes)).c_str(),
          format_bytes(static_cast<double>(plan.dp_peer_bytes)).c_str(),
          total > 0 ? 100.0 * static_cast<double>(plan.kept_bytes) / total : 100.0,
          format_bytes(static_cast<double>(plan.max_bytes_into_slot)).c_str());
  std::map<int, std::pair<std::int64_t, std::int64_t>> per_domain;  // (intra, peer)
  for (const auto& t : plan.transfers) {
    auto& [intra, peer] = per_domain[t.destination.domain];
    (t.intra_domain() ? intra : peer) += t.bytes;
  }
  constexpr int kMaxDomainLines = 20;
  int shown = 0;
  for (const auto& [domain, bytes] : per_domain) {
    if (!details && shown == kMaxDomainLines) {
      appendf(out, "    ... %zu more domains (use --details)\n",
              per_domain.size() - kMaxDomainLines);
      break;
    }
    ++shown;
    appendf(out, "    domain %-6d TP%-3d within domain %12s   from DP peers %12s\n", domain,
            to.replicas[static_cast<std::size_t>(domain)].degree(),
            format_bytes(static_cast<double>(bytes.first)).c_str(),
            format_bytes(static_cast<double>(bytes.second)).c_str());
  }
  if (!details) return;
  for (const auto& t : plan.transfers) {
    appendf(out, "      %s %s -> %s units %s (%s)\n",
            to.spec.spaces[static_cast<std::size_t>(t.space)].name.c_str(),
            slot_name(t.source).c_str(), slot_name(t.destination).c_str(),
            t.units.to_string().c_str(), format_bytes(static_cast<double>(t.bytes)).c_str());
  }
}

}  // namespace

std::string render_plan_text(const api::PlanResult& result, bool details) {
  const auto& spec = result.degraded.spec;
  const auto& m = result.shape;
  std::string out;
  appendf(out, "cluster: %d domains x %d slots (%d GPUs), %zu failed, min TP %d\n", spec.domains,
          spec.domain_size, spec.domains * spec.domain_size, spec.failed.size(), spec.min_tp);
  appendf(out,
          "model:   %lld heads, hidden %lld, FFN %lld (units of %lld columns), vocab %lld, %lld "
          "layers\n",
          static_cast<long long>(m.heads), static_cast<long long>(m.hidden),
          static_cast<long long>(m.ffn), static_cast<long long>(m.ffn_block),
          static_cast<long long>(m.vocab), static_cast<long long>(m.layers));
  out += "units:  ";
  for (const auto& space : spec.spaces) {
    appendf(
        out, " %s %lld x %s;", space.name.c_str(), static_cast<long long>(space.units),
        format_bytes(static_cast<double>(space.params_per_unit * spec.bytes.state_bytes)).c_str());
  }
  appendf(out, " (%lld B/param of state, %lld B/param of gradient)\n",
          static_cast<long long>(spec.bytes.state_bytes),
          static_cast<long long>(spec.bytes.grad_bytes));

  out += "\nreplicas after the failures:\n";
  render_replicas(out, result.degraded, details);
  render_sync(out, result.degraded, details);
  render_reshard(out, ("failure (" + std::to_string(spec.failed.size()) + " GPUs lost)").c_str(),
                 result.degraded, result.on_failure, details);
  if (result.repaired) {
    const std::size_t back = spec.failed.size() - result.repaired->spec.failed.size();
    out += "\nreplicas after the repair:\n";
    render_replicas(out, *result.repaired, details);
    appendf(out, "  sync degree %d\n", result.repaired->sync.sync_degree);
    render_reshard(out, ("repair (" + std::to_string(back) + " GPUs back)").c_str(),
                   *result.repaired, *result.on_repair, details);
  }
  return out;
}

}  // namespace ntp::cli
