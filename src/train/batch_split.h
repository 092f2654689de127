// How a step's global batch is split over replicas that do not all run at the same speed.
//
// The global batch is `global_batch` sequences; replica d takes the consecutive samples
// [begin, begin + samples) of each step's batch (data/batcher.h) in micro-batches of at most
// `micro_batch` (the last one may be smaller) and accumulates their gradients. A replica's *pace*
// is its speed relative to a healthy replica's (train/replica_pace.h: fewer devices, a slowed
// device, a power boost). Policies:
//   keep   every replica keeps the same share (balanced to within one micro-batch), whatever its
//          pace: a slower replica sets the step time of the whole job.
//   scale  shares follow the paces, to the sample (at least one each): the split whose slowest
//          replica (samples / pace) finishes first, so shares are proportional to pace as far as
//          whole samples allow; the global batch never changes.
//   boost  boost-then-share: a degraded replica's devices are boosted as far as the power control
//          can apply within the rack budget (power/boost_planner.h), and its share follows the
//          boosted pace as with scale, so the share covers what the boost cannot. A control that
//          cannot change power (the CPU one) boosts nothing: then this is scale.
// Whatever the split, the step's gradient is the sample-weighted mean over the whole global batch:
// a micro-batch of m samples contributes with weight m / global_batch.
//
// The grain of scale's and boost's split (keep's is always whole micro-batches):
//   kSample      to the sample, as above: the finest balance.
//   kMicroBatch  in whole micro-batches: every replica's share starts at a multiple of
//                micro_batch, so the step's forwards hold exactly the samples they hold in a
//                failure-free run ([j m, (j + 1) m) for micro-batch j), whichever replica runs
//                them. A loss that is a statistic of each forward's tokens (a MoE's load-balancing
//                loss) is then the same whatever the paces; a sample grain would change it.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace ntp::train {

enum class BatchPolicy { kKeep, kScale, kBoost };
enum class BatchGrain { kSample, kMicroBatch };

// Parses "keep" / "scale" / "boost" (kInvalidArgument naming --batch-policy otherwise).
Result<BatchPolicy> parse_batch_policy(std::string_view text);
const char* batch_policy_name(BatchPolicy policy);

struct ReplicaBatch {
  int64_t begin = 0;          // first sample of the global batch
  int64_t samples = 0;        // >= 1, or 0 for a replica that left the job
  int64_t micro_batches = 0;  // gradient-accumulation steps: ceil(samples / micro_batch)

  // The size of micro-batch k (all micro_batch but the last).
  int64_t micro_size(int64_t k, int64_t micro_batch) const;
};

// pace[d] in (0, 1]: replica d's pace (1: healthy); 0: the replica left the job, takes no
// samples, and the others split the whole global batch as if it were not there. Every replica at
// full pace: keep's split under any policy, unless the batch has fewer micro-batches than replicas
// (scale and boost at the sample grain then split samples). kInvalidArgument (naming --batch /
// --micro-batch) when the batch is not a whole number of micro-batches, has fewer micro-batches
// than replicas (keep, or the micro-batch grain) or fewer samples.
Result<std::vector<ReplicaBatch>> split_global_batch(BatchPolicy policy,
                                                     const std::vector<double>& pace,
                                                     int64_t global_batch, int64_t micro_batch,
                                                     BatchGrain grain = BatchGrain::kSample);

}  // namespace ntp::train
