#include "train/job_window_eval.h"

#include <vector>

#include "train/job.h"

namespace ntp::train {

Result<WindowEvalResult> evaluate_windows_in_job(const TrainConfig& c, const WorkerContext& ctx,
                                                 shard::ClusterLayout layout, shard::SlotRef slot,
                                                 const WeightSource& source,
                                                 std::span<const uint16_t> tokens,
                                                 const WindowEvalOptions& resolved) {
  Job job;
  NTP_RETURN_IF_ERROR(build_forward_job(job, c, ctx, std::move(layout), slot, /*epoch=*/0,
                                        InitialState::kFilledByCaller));
  NTP_RETURN_IF_ERROR(read_param_values(source, job.model->params()));
  const WorkerRole& role = job.role;
  const WindowEvalOptions share = replica_windows(resolved, role.replicas, role.replica_index);
  double sum = 0.0;
  if (share.windows > 0) {
    NTP_ASSIGN_OR_RETURN(const WindowEvalResult mine, evaluate_windows(*job.model, tokens, share));
    sum = mine.sum;
  }
  // Every rank of a replica computes the same loss: TP rank 0 contributes it, in its world-rank
  // slot, so the sum over the slots adds exactly one value per replica, in the same order on every
  // rank (zeros add exactly).
  std::vector<double> slots(static_cast<size_t>(role.world_size), 0.0);
  if (role.tp_rank == 0) slots[static_cast<size_t>(role.world_rank)] = sum;
  NTP_RETURN_IF_ERROR(job.world->allreduce(comm::view(slots)));
  WindowEvalResult result;
  for (double s : slots) result.sum += s;
  result.windows = resolved.windows;
  result.tokens = resolved.windows * resolved.context;
  result.loss = result.sum / static_cast<double>(result.tokens);
  return result;
}

}  // namespace ntp::train
