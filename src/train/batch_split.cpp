#include "train/batch_split.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "core/named_values.h"
#include "shard/balance.h"

namespace ntp::train {
namespace {

constexpr NamedValue<BatchPolicy> kBatchPolicyNames[] = {
    {BatchPolicy::kKeep, "keep"}, {BatchPolicy::kScale, "scale"}, {BatchPolicy::kBoost, "boost"}};

// A pace this close to 1 is full pace (paces are ratios of unit counts and speeds).
constexpr double kFullPace = 1.0 - 1e-9;

std::vector<ReplicaBatch> consecutive(const std::vector<int64_t>& samples, int64_t micro_batch) {
  std::vector<ReplicaBatch> out;
  int64_t begin = 0;
  for (int64_t n : samples) {
    out.push_back({begin, n, (n + micro_batch - 1) / micro_batch});
    begin += n;
  }
  return out;
}

// The split of `units` (samples, or micro-batches) with the least step time max over d of
// units[d] / pace[d], at least one unit each: unit by unit to the replica that would finish it
// first (for this objective, greedy is optimal), ties to the lowest replica. Unlike rounding the
// proportional shares, it never moves a unit that makes the step longer, which matters when a
// replica's share is a few units.
std::vector<int64_t> split_by_pace(const std::vector<double>& pace, int64_t units) {
  std::vector<int64_t> samples(pace.size(), 1);
  for (int64_t left = units - static_cast<int64_t>(pace.size()); left > 0; --left) {
    size_t best = 0;
    for (size_t d = 1; d < pace.size(); ++d) {
      if (static_cast<double>(samples[d] + 1) / pace[d] <
          static_cast<double>(samples[best] + 1) / pace[best]) {
        best = d;
      }
    }
    ++samples[best];
  }
  return samples;
}

}  // namespace

Result<BatchPolicy> parse_batch_policy(std::string_view text) {
  return parse_named(kBatchPolicyNames, "--batch-policy", text);
}

const char* batch_policy_name(BatchPolicy policy) { return name_of(kBatchPolicyNames, policy); }

int64_t ReplicaBatch::micro_size(int64_t k, int64_t micro_batch) const {
  return std::min(micro_batch, samples - k * micro_batch);
}

namespace {

Status too_few_micro_batches(int64_t global_batch, int64_t micro_total, int64_t micro_batch,
                             int64_t replicas) {
  return invalid_argument(
      "--batch " + std::to_string(global_batch) + " holds " + std::to_string(micro_total) +
      " micro-batches of " + std::to_string(micro_batch) + ", fewer than the " +
      std::to_string(replicas) + " replicas; every replica needs at least one (raise --batch)");
}

// The split among replicas that are all in the job (every pace > 0).
Result<std::vector<ReplicaBatch>> split_present(BatchPolicy policy, const std::vector<double>& pace,
                                                int64_t global_batch, int64_t micro_batch,
                                                BatchGrain grain) {
  const auto replicas = static_cast<int64_t>(pace.size());
  if (micro_batch < 1) {
    return invalid_argument("--micro-batch must be at least 1, got " + std::to_string(micro_batch));
  }
  if (global_batch < 1 || global_batch % micro_batch != 0) {
    return invalid_argument("--batch " + std::to_string(global_batch) +
                            " must be a positive multiple of --micro-batch " +
                            std::to_string(micro_batch));
  }
  const int64_t micro_total = global_batch / micro_batch;
  const bool uniform =
      std::all_of(pace.begin(), pace.end(), [](double p) { return p >= kFullPace; });
  if (policy != BatchPolicy::kKeep && grain == BatchGrain::kMicroBatch && !uniform) {
    if (micro_total < replicas) {
      return too_few_micro_batches(global_batch, micro_total, micro_batch, replicas);
    }
    std::vector<int64_t> samples = split_by_pace(pace, micro_total);
    for (int64_t& n : samples) n *= micro_batch;
    return consecutive(samples, micro_batch);
  }
  if (policy != BatchPolicy::kKeep && grain == BatchGrain::kSample &&
      (!uniform || micro_total < replicas)) {
    if (global_batch < replicas) {
      return invalid_argument("--batch " + std::to_string(global_batch) +
                              " has fewer samples than the " + std::to_string(replicas) +
                              " replicas; every replica needs one (raise --batch)");
    }
    return consecutive(split_by_pace(pace, global_batch), micro_batch);
  }
  if (micro_total < replicas) {
    return too_few_micro_batches(global_batch, micro_total, micro_batch, replicas);
  }
  std::vector<int64_t> samples(static_cast<size_t>(replicas));
  for (int64_t d = 0; d < replicas; ++d) {
    samples[static_cast<size_t>(d)] = shard::balanced_count(micro_total, replicas, d) * micro_batch;
  }
  return consecutive(samples, micro_batch);
}

}  // namespace

Result<std::vector<ReplicaBatch>> split_global_batch(BatchPolicy policy,
                                                     const std::vector<double>& pace,
                                                     int64_t global_batch, int64_t micro_batch,
                                                     BatchGrain grain) {
  std::vector<double> present;
  for (double p : pace) {
    if (p > 0.0) present.push_back(p);
  }
  NTP_ASSIGN_OR_RETURN(std::vector<ReplicaBatch> split,
                       split_present(policy, present, global_batch, micro_batch, grain));
  // A replica that left takes no samples; the others' shares cover the whole global batch.
  std::vector<ReplicaBatch> out;
  size_t next = 0;
  for (double p : pace) {
    if (p > 0.0) {
      out.push_back(split[next++]);
    } else {
      out.push_back({out.empty() ? 0 : out.back().begin + out.back().samples, 0, 0});
    }
  }
  return out;
}

}  // namespace ntp::train
