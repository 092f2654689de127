#include "train/undo_log.h"

namespace ntp::train {

std::vector<std::span<float>> updated_state(Job& job) {
  std::vector<std::span<float>> out;
  std::vector<model::Param>& params = job.model->params();
  for (size_t i = 0; i < params.size(); ++i) {
    out.push_back(params[i].value.span());
    if (job.adamw) {
      out.emplace_back(job.adamw->exp_avg(i));
      out.emplace_back(job.adamw->exp_avg_sq(i));
    }
  }
  if (job.sharded) {
    for (size_t c = 0; c < job.sharded->exp_avgs().size(); ++c) {
      out.emplace_back(job.sharded->master(c));
      out.emplace_back(job.sharded->exp_avg(c));
      out.emplace_back(job.sharded->exp_avg_sq(c));
    }
    for (std::vector<float>& copy : job.sharded->mirror_exp_avgs()) out.emplace_back(copy);
    for (std::vector<float>& copy : job.sharded->mirror_exp_avg_sqs()) out.emplace_back(copy);
  }
  return out;
}

int64_t optimizer_steps(const Job& job) {
  return job.adamw ? job.adamw->steps_taken() : job.sharded->steps_taken();
}

}  // namespace ntp::train
