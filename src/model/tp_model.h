// TpModel: what GptModel and LlamaModel share as one TP rank of a model::Model, whatever the
// family: the parameter table and its split over the rank's TpGroup, the order gradients become
// ready, the batch check and the forward of the vocabulary-parallel cross-entropy.
//
// A family derives from it, fills params_ (add_param) and ready_groups_ in its create(), and
// implements run(): the loss of one batch and, when asked, its backward.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "core/status.h"
#include "model/backward_options.h"
#include "model/model.h"
#include "model/param.h"
#include "model/tp_group.h"

namespace ntp::model {

class TpModel : public Model {
 public:
  std::vector<Param>& params() override { return params_; }
  const std::vector<Param>& params() const override { return params_; }

  void zero_grad() override;
  // Forward and backward; returns the mean loss and accumulates gradients (see BackwardOptions).
  // Collective.
  Result<double> forward_backward(std::span<const int32_t> tokens, std::span<const int32_t> targets,
                                  int64_t b, int64_t t,
                                  const BackwardOptions& options = {}) override;
  // Forward only (evaluation). Collective.
  Result<double> loss(std::span<const int32_t> tokens, std::span<const int32_t> targets, int64_t b,
                      int64_t t) override;
  // The groups on_grads_ready reports, in the order it reports them.
  const std::vector<std::vector<int>>& grads_ready_order() const override { return ready_groups_; }

 protected:
  // How a parameter is split over TP ranks (model/param.h); the default is replicated.
  struct Sharding {
    int axis = -1;
    std::vector<int64_t> index;
    UnitSpaceId space = UnitSpaceId::kNone;
    int64_t outer = 1, inner = 1;
  };

  // `group` (degree 1 when null) must outlive the model.
  explicit TpModel(TpGroup* group) : group_(group) {}
  TpModel(TpModel&&) = default;
  TpModel& operator=(TpModel&&) = default;

  // The loss of one batch (the caller checks nothing) and, when backward is not null, its
  // backward; forward_backward and loss call it.
  virtual Result<double> run(std::span<const int32_t> tokens, std::span<const int32_t> targets,
                             int64_t b, int64_t t, const BackwardOptions* backward) = 0;

  // Appends a parameter (no storage yet) and returns its index in params_.
  int add_param(std::string name, std::vector<int64_t> logical_shape, const Sharding& sharding);
  // The logical indices along an axis of a tensor whose units are `width` slices wide:
  // offset + u * width + e for each listed unit u (in order) and e in [0, width).
  static void append_unit_slices(const std::vector<int64_t>& units, int64_t width, int64_t offset,
                                 std::vector<int64_t>& out);
  float* w(int index) { return params_[static_cast<size_t>(index)].value.data(); }
  float* dw(int index) { return params_[static_cast<size_t>(index)].grad.data(); }
  TpGroup& group() { return group_ != nullptr ? *group_ : solo_; }
  // In place: data <- its sum over the replica (nothing to do at degree 1).
  Status all_reduce(std::span<float> data);
  // kInvalidArgument unless b >= 1, 1 <= t <= n_ctx and tokens and targets hold b * t ids in
  // [0, vocab_size).
  static Status check_batch(std::span<const int32_t> tokens, std::span<const int32_t> targets,
                            int64_t b, int64_t t, int64_t n_ctx, int64_t vocab_size);
  // Forward of the parallel cross-entropy over logits [n, vl] of this rank's vocabulary rows
  // (local_index: logical id -> local row or -1): gmax [n] <- the global row maxima (a rank with
  // no row contributes -inf), stats [2n] <- [global exp-sum | global target logit]; returns the
  // mean loss in nats. The backward reads gmax and stats (kernels/cpu/cross_entropy.h).
  Result<double> cross_entropy_forward(const std::vector<float>& logits, int64_t n, int64_t vl,
                                       std::span<const int32_t> targets,
                                       const std::vector<int64_t>& local_index,
                                       std::vector<float>& gmax, std::vector<float>& stats);

  std::vector<Param> params_;
  std::vector<std::vector<int>> ready_groups_;  // see grads_ready_order()

 private:
  TpGroup* group_;
  SoloTpGroup solo_;
};

}  // namespace ntp::model
