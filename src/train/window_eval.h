// `ntp eval`: the mean loss of a model over contiguous windows of a token file (in one process
// here; train/job_window_eval.h splits the windows over the replicas of a job).
//
// Window i of T + 1 tokens covers tokens K + i*T .. K + (i+1)*T (inclusive) of the file: inputs
// the first T, targets the last T, so consecutive windows share one token and every token after
// K is predicted at most once. The loss is the mean over all N*T targets, in nats, summed in
// float64 from the per-batch means the model returns (B windows per forward).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>

#include "core/status.h"
#include "model/model.h"
#include "model/model_config.h"
#include "train/weight_source.h"

namespace ntp::train {

struct WindowEvalOptions {
  int64_t context = 0;  // T, at most the model's n_ctx
  int64_t batch = 0;    // B: windows per forward
  int64_t windows = 0;  // N; 0: every whole window after `offset`
  int64_t offset = 0;   // K
};

struct WindowEvalResult {
  double loss = 0.0;    // mean over the targets (0 when there are none)
  double sum = 0.0;     // loss x targets: sum over the batches of their mean x their targets
  int64_t tokens = 0;   // targets: windows * context
  int64_t windows = 0;  // N
};

// Checks the options against the model's context, its vocabulary and a token file of
// tokens.size() tokens (named `data` in messages), and fills in N when 0. kInvalidArgument naming
// the flag, the bad value and the fix (a file too short for the windows asked for, a token outside
// the vocabulary).
Result<WindowEvalOptions> resolve_windows(const WindowEvalOptions& options,
                                          std::span<const uint16_t> tokens,
                                          const model::ModelConfig& config,
                                          const std::string& data);

// The mean loss of `model` over the resolved windows. `progress`, when set, is told the windows
// done after every batch.
Result<WindowEvalResult> evaluate_windows(model::Model& model, std::span<const uint16_t> tokens,
                                          const WindowEvalOptions& resolved,
                                          const std::function<void(int64_t)>& progress = {});

// The windows replica `index` of `replicas` evaluates under `ntp launch`: the batches of B windows
// one process would run (the last may be smaller), in balanced contiguous runs, so that every
// batch holds the same windows at any layout. `offset` moves to the run's first window; `windows`
// may be 0 (more replicas than batches; then `offset` is the end of the windows).
WindowEvalOptions replica_windows(const WindowEvalOptions& resolved, int replicas, int index);

// A model of source.config for one process (every unit of every space on one rank, no TP group)
// holding the source's weights.
Result<std::unique_ptr<model::Model>> load_whole_model(const WeightSource& source);

}  // namespace ntp::train
