#include "train/window_eval.h"

#include <algorithm>
#include <vector>

#include "model/model_factory.h"
#include "shard/balance.h"

namespace ntp::train {

Result<WindowEvalOptions> resolve_windows(const WindowEvalOptions& o,
                                          std::span<const uint16_t> tokens,
                                          const model::ModelConfig& config,
                                          const std::string& data) {
  if (o.context < 1 || o.context > config.n_ctx) {
    return invalid_argument("--context " + std::to_string(o.context) +
                            " must be in [1, the model's context " + std::to_string(config.n_ctx) +
                            "]");
  }
  if (o.batch < 1) {
    return invalid_argument("--batch " + std::to_string(o.batch) + " must be at least 1");
  }
  if (o.windows < 0) {
    return invalid_argument("--windows " + std::to_string(o.windows) +
                            " must be at least 1 (0 or absent: every window the file holds)");
  }
  if (o.offset < 0) {
    return invalid_argument("--offset " + std::to_string(o.offset) + " must be at least 0");
  }
  const auto n = static_cast<int64_t>(tokens.size());
  const int64_t fit = n > o.offset ? (n - o.offset - 1) / o.context : 0;
  WindowEvalOptions r = o;
  if (r.windows == 0) r.windows = fit;
  if (fit == 0 || r.windows > fit) {
    const int64_t asked = std::max<int64_t>(r.windows, 1);
    return invalid_argument(data + " holds " + std::to_string(n) + " tokens, but " +
                            std::to_string(asked) + (asked == 1 ? " window" : " windows") +
                            " of --context " + std::to_string(o.context) + " from --offset " +
                            std::to_string(o.offset) + " need " +
                            std::to_string(o.offset + asked * o.context + 1) +
                            (fit == 0 ? "; use a smaller --offset or --context"
                                      : "; ask for at most --windows " + std::to_string(fit)));
  }
  const auto end = static_cast<size_t>(r.offset + r.windows * r.context + 1);
  for (size_t i = static_cast<size_t>(r.offset); i < end; ++i) {
    if (tokens[i] >= config.vocab_size) {
      return invalid_argument(data + ": token " + std::to_string(tokens[i]) + " at position " +
                              std::to_string(i) + " is outside the model's vocabulary of " +
                              std::to_string(config.vocab_size) +
                              "; evaluate on tokens of the model's tokenizer");
    }
  }
  return r;
}

Result<WindowEvalResult> evaluate_windows(model::Model& model, std::span<const uint16_t> tokens,
                                          const WindowEvalOptions& r,
                                          const std::function<void(int64_t)>& progress) {
  const int64_t t = r.context;
  std::vector<int32_t> inputs, targets;
  double sum = 0.0;  // loss x targets, over the batches done
  for (int64_t first = 0; first < r.windows; first += r.batch) {
    const int64_t b = std::min(r.batch, r.windows - first);
    inputs.resize(static_cast<size_t>(b * t));
    targets.resize(inputs.size());
    for (int64_t w = 0; w < b; ++w) {
      const int64_t start = r.offset + (first + w) * t;
      for (int64_t i = 0; i < t; ++i) {
        inputs[static_cast<size_t>(w * t + i)] = tokens[static_cast<size_t>(start + i)];
        targets[static_cast<size_t>(w * t + i)] = tokens[static_cast<size_t>(start + i + 1)];
      }
    }
    NTP_ASSIGN_OR_RETURN(const double loss, model.loss(inputs, targets, b, t));
    sum += loss * static_cast<double>(b * t);
    if (progress) progress(first + b);
  }
  WindowEvalResult result;
  result.windows = r.windows;
  result.tokens = r.windows * t;
  result.sum = sum;
  result.loss = result.tokens > 0 ? sum / static_cast<double>(result.tokens) : 0.0;
  return result;
}

WindowEvalOptions replica_windows(const WindowEvalOptions& r, int replicas, int index) {
  const int64_t batches = (r.windows + r.batch - 1) / r.batch;
  const int64_t first =
      std::min(r.windows, shard::balanced_offset(batches, replicas, index) * r.batch);
  const int64_t end =
      std::min(r.windows, first + shard::balanced_count(batches, replicas, index) * r.batch);
  WindowEvalOptions share = r;
  share.offset = r.offset + first * r.context;
  share.windows = std::max<int64_t>(end - first, 0);
  return share;
}

Result<std::unique_ptr<model::Model>> load_whole_model(const WeightSource& source) {
  NTP_ASSIGN_OR_RETURN(
      std::unique_ptr<model::Model> m,
      model::create_model(source.config, one_rank_shard(source.config, /*whole=*/true), /*seed=*/0,
                          /*group=*/nullptr,
                          /*initialize=*/false));
  NTP_RETURN_IF_ERROR(read_param_values(source, m->params()));
  return m;
}

}  // namespace ntp::train
