// run_training: one worker of a job (train/trainer.h). The loop itself is LiveRun
// (train/live_run.h): the step loop and the start in live_run.cpp, one step in live_step.cpp,
// the re-formation in reformation.cpp; the job a layout implies in job.h.
#include "train/trainer.h"

#include <algorithm>
#include <memory>

#include "data/token_file.h"
#include "train/live_run.h"

namespace ntp::train {
namespace {

Result<std::shared_ptr<const std::vector<uint16_t>>> load_tokens(const std::string& path,
                                                                 const char* flag) {
  Result<std::vector<uint16_t>> tokens = data::read_token_file(path);
  if (!tokens.ok()) {
    return invalid_argument(std::string(flag) + " " + path + ": " + tokens.status().message() +
                            (tokens.status().code() == StatusCode::kNotFound
                                 ? " (scripts/setup.sh prepares the fortunes corpus in data/)"
                                 : ""));
  }
  return std::make_shared<const std::vector<uint16_t>>(std::move(*tokens));
}
}  // namespace

Result<TrainSummary> run_training(TrainConfig c, const WorkerContext& ctx) {
  NTP_RETURN_IF_ERROR(validate_train_config(c));
  const shard::SlotRef slot{ctx.slot_rank / c.tp, ctx.slot_rank % c.tp};
  if (std::binary_search(c.failed.begin(), c.failed.end(), slot)) {
    TrainSummary summary;
    summary.took_part = false;
    return summary;
  }
  NTP_ASSIGN_OR_RETURN(auto train_tokens, load_tokens(c.train_data, "--train-data"));
  NTP_ASSIGN_OR_RETURN(auto val_tokens, load_tokens(c.val_data, "--val-data"));
  NTP_ASSIGN_OR_RETURN(
      data::Batcher train_batches,
      data::Batcher::create(train_tokens, c.global_batch(), c.model.n_ctx, c.data_seed));
  NTP_ASSIGN_OR_RETURN(
      data::Batcher val_batches,
      data::Batcher::create(val_tokens, c.eval_samples, c.model.n_ctx, c.data_seed + 1));
  auto run = std::make_unique<LiveRun>(c, ctx, std::move(train_batches), std::move(val_batches));
  NTP_ASSIGN_OR_RETURN(std::optional<TrainSummary> left, run->start());
  if (left) return *left;
  return run->run();
}

}  // namespace ntp::train
