// `ntp eval` under `ntp launch`: the windows of train/window_eval.h evaluated by a job of any
// layout (mixed TP degrees included). Each replica runs its share of the batches (replica_windows)
// on its TP group, at its degree, and the shares' loss sums are added in float64 over the job.
#pragma once

#include <cstdint>
#include <span>

#include "core/status.h"
#include "shard/cluster_layout.h"
#include "train/train_config.h"
#include "train/trainer.h"
#include "train/weight_source.h"
#include "train/window_eval.h"

namespace ntp::train {

// One worker's part: builds the forward-only job of `layout` for `slot` (build_forward_job:
// communicators from `ctx`, the model c.model), reads its slices of `source`'s weights, evaluates
// its replica's windows of `resolved` and sums over the replicas. Every worker of the layout calls
// it and gets the same result: the loss sum of the job's windows over N*T targets. `source` has
// been checked against c.model (check_weight_source), so a read error here is not bad input.
Result<WindowEvalResult> evaluate_windows_in_job(const TrainConfig& c, const WorkerContext& ctx,
                                                 shard::ClusterLayout layout, shard::SlotRef slot,
                                                 const WeightSource& source,
                                                 std::span<const uint16_t> tokens,
                                                 const WindowEvalOptions& resolved);

}  // namespace ntp::train
