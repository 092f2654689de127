// How a step's global batch is split over replicas of different TP degrees.
//
// The global batch is `global_batch` sequences in micro-batches of `micro_batch`; replica d takes
// the consecutive samples [begin, begin + samples) of each step's batch (train/batcher.h), in
// whole micro-batches, and accumulates their gradients. Policies for a degraded replica:
//   keep   every replica takes the same share (balanced to within one micro-batch); a degraded
//          replica is slower, which power boosting buys back.
//   scale  a replica's share is proportional to its active devices, rounded to whole micro-batches
//          (at least one); healthy replicas share the rest, so the global batch never changes.
// Either way the step's gradient is the sample-weighted mean over the whole global batch: a
// micro-batch of m samples contributes with weight m / global_batch.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace ntp::train {

enum class BatchPolicy { kKeep, kScale };

// Parses "keep" / "scale" (kInvalidArgument naming --batch-policy otherwise).
Result<BatchPolicy> parse_batch_policy(std::string_view text);
const char* batch_policy_name(BatchPolicy policy);

struct ReplicaBatch {
  int64_t begin = 0;          // first sample of the global batch
  int64_t samples = 0;        // a multiple of the micro-batch
  int64_t micro_batches = 0;  // gradient-accumulation steps of this replica
};

// degrees[d]: active devices of replica d; full_degree: a healthy replica's. kInvalidArgument
// (naming --batch / --micro-batch) when the batch is not a whole number of micro-batches or has
// fewer micro-batches than replicas.
Result<std::vector<ReplicaBatch>> split_global_batch(BatchPolicy policy,
                                                     const std::vector<int>& degrees,
                                                     int full_degree, int64_t global_batch,
                                                     int64_t micro_batch);

}  // namespace ntp::train
