#include "model/tp_model.h"

#include <algorithm>
#include <limits>
#include <utility>

#include "kernels/cpu/cross_entropy.h"
#include "kernels/cpu/parallel.h"

namespace ntp::model {

namespace k = ntp::kernels::cpu;

void TpModel::zero_grad() {
  for (Param& p : params_) {
    float* g = p.grad.data();
    k::parallel_for(p.grad.numel(), int64_t{1} << 16,
                    [g](int64_t i0, int64_t i1) { std::fill(g + i0, g + i1, 0.0f); });
  }
}

Result<double> TpModel::forward_backward(std::span<const int32_t> tokens,
                                         std::span<const int32_t> targets, int64_t b, int64_t t,
                                         const BackwardOptions& options) {
  return run(tokens, targets, b, t, &options);
}

Result<double> TpModel::loss(std::span<const int32_t> tokens, std::span<const int32_t> targets,
                             int64_t b, int64_t t) {
  return run(tokens, targets, b, t, nullptr);
}

int TpModel::add_param(std::string name, std::vector<int64_t> logical_shape,
                       const Sharding& sharding) {
  Param p;
  p.name = std::move(name);
  p.logical_shape = std::move(logical_shape);
  p.shard_axis = sharding.axis;
  p.logical_index = sharding.index;
  p.space = sharding.space;
  p.unit_outer = sharding.outer;
  p.unit_inner = sharding.inner;
  params_.push_back(std::move(p));
  return static_cast<int>(params_.size()) - 1;
}

void TpModel::append_unit_slices(const std::vector<int64_t>& units, int64_t width, int64_t offset,
                                 std::vector<int64_t>& out) {
  for (int64_t u : units) {
    for (int64_t e = 0; e < width; ++e) out.push_back(offset + u * width + e);
  }
}

Status TpModel::all_reduce(std::span<float> data) {
  if (group().size() == 1) return ok_status();
  return group().all_reduce_sum(data);
}

Status TpModel::check_batch(std::span<const int32_t> tokens, std::span<const int32_t> targets,
                            int64_t b, int64_t t, int64_t n_ctx, int64_t vocab_size) {
  if (b <= 0 || t <= 0 || t > n_ctx) {
    return invalid_argument("batch shape [" + std::to_string(b) + ", " + std::to_string(t) +
                            "] needs b >= 1 and 1 <= t <= n_ctx = " + std::to_string(n_ctx));
  }
  if (static_cast<int64_t>(tokens.size()) != b * t ||
      static_cast<int64_t>(targets.size()) != b * t) {
    return invalid_argument("tokens and targets must hold b * t = " + std::to_string(b * t) +
                            " ids");
  }
  for (std::span<const int32_t> ids : {tokens, targets}) {
    for (int32_t id : ids) {
      if (id < 0 || id >= vocab_size) {
        return invalid_argument("token id " + std::to_string(id) +
                                " is outside the vocabulary [0, " + std::to_string(vocab_size) +
                                ")");
      }
    }
  }
  return ok_status();
}

Result<double> TpModel::cross_entropy_forward(const std::vector<float>& logits, int64_t n,
                                              int64_t vl, std::span<const int32_t> targets,
                                              const std::vector<int64_t>& local_index,
                                              std::vector<float>& gmax, std::vector<float>& stats) {
  // Global row max first (row_max needs at least one column), then the global exp-sum and
  // target logit in one all-reduce.
  TpGroup& grp = group();
  gmax.assign(static_cast<size_t>(n), -std::numeric_limits<float>::infinity());
  if (vl > 0) k::row_max(logits.data(), n, vl, gmax.data());
  if (grp.size() > 1) {
    std::vector<float> all(static_cast<size_t>(n * grp.size()));
    NTP_RETURN_IF_ERROR(grp.all_gather(gmax, all));
    std::fill(gmax.begin(), gmax.end(), -std::numeric_limits<float>::infinity());
    for (int r = 0; r < grp.size(); ++r) {
      for (int64_t i = 0; i < n; ++i) gmax[i] = std::max(gmax[i], all[r * n + i]);
    }
  }
  stats.resize(static_cast<size_t>(2 * n));
  k::row_sum_exp(logits.data(), n, vl, gmax.data(), stats.data());
  k::target_logits(logits.data(), n, vl, targets.data(), local_index, stats.data() + n);
  NTP_RETURN_IF_ERROR(all_reduce(stats));
  return k::cross_entropy_loss_sum(n, gmax.data(), stats.data(), stats.data() + n) /
         static_cast<double>(n);
}

}  // namespace ntp::model
