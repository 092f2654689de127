#include "train/adamw_optimizer.h"

#include <cmath>
#include <numbers>

#include "core/check.h"

namespace ntp::train {

AdamWOptimizer::AdamWOptimizer(const std::vector<model::Param>& params,
                               kernels::cpu::AdamWHyper hyper)
    : hyper_(hyper) {
  for (const model::Param& p : params) {
    m_.emplace_back(static_cast<size_t>(p.value.numel()), 0.0f);
    v_.emplace_back(static_cast<size_t>(p.value.numel()), 0.0f);
  }
}

void AdamWOptimizer::step(std::vector<model::Param>& params, float lr, float grad_scale) {
  NTP_CHECK_MSG(params.size() == m_.size(), "optimizer built for a different parameter list");
  ++steps_;
  for (size_t i = 0; i < params.size(); ++i) {
    model::Param& p = params[i];
    NTP_CHECK(static_cast<size_t>(p.value.numel()) == m_[i].size());
    kernels::cpu::AdamWHyper h = hyper_;
    h.lr = lr;
    if (p.value.rank() != 2) h.weight_decay = 0.0f;
    kernels::cpu::adamw_step(p.value.data(), p.grad.data(), m_[i].data(), v_[i].data(),
                             p.value.numel(), steps_, h, grad_scale);
  }
}

float warmup_cosine_lr(int64_t step, int64_t warmup, int64_t total, float max_lr, float min_lr) {
  if (step < warmup) {
    return max_lr * static_cast<float>(step + 1) / static_cast<float>(warmup);
  }
  if (step >= total) return min_lr;
  const double progress = static_cast<double>(step - warmup) /
                          static_cast<double>(std::max<int64_t>(1, total - warmup));
  const double cosine = 0.5 * (1.0 + std::cos(std::numbers::pi * progress));
  return min_lr + static_cast<float>(cosine) * (max_lr - min_lr);
}

}  // namespace ntp::train
