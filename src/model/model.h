// Model: what the trainer, the sync executor, ZeRO-1, checkpoints and reshards need of one TP
// rank of a model replica, whatever its family (DESIGN 2.6). GptModel and LlamaModel implement
// it; model/model_factory.h makes one from a ModelConfig.
//
// The contract every family keeps:
//   - params(): the rank's tensors in a fixed order (the same on every rank and at every layout),
//     each with its map to the logical tensor (model/param.h). Sharded parameters hold whole units
//     of a unit space; units marked in Param::unit_copy duplicate another rank's owner copy and
//     are counted once (by the owner).
//   - forward_backward accumulates loss_scale * d(mean loss)/d(param) into Param::grad, calling
//     BackwardOptions::on_grads_ready with the groups of grads_ready_order() as they finish.
//     Replicated parameters end with identical gradients on every rank of the replica, and so do
//     the copies of a duplicated unit.
//   - forward_backward, loss and grad_norm are collective over the replica's TpGroup.
// Tokens and targets are int32 [B, T] row-major, T <= n_ctx; losses are the mean over B*T tokens
// in nats.
#pragma once

#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "kernels/cpu/matmul.h"
#include "model/backward_options.h"
#include "model/expert_dispatch.h"
#include "model/param.h"

namespace ntp::model {

class Model {
 public:
  Model() = default;
  Model(const Model&) = delete;
  Model& operator=(const Model&) = delete;
  virtual ~Model() = default;

  virtual std::vector<Param>& params() = 0;
  virtual const std::vector<Param>& params() const = 0;
  // Null when no parameter has that name.
  Param* find(std::string_view name);

  virtual void zero_grad() = 0;
  // Forward and backward; returns the mean loss and accumulates gradients (see BackwardOptions).
  virtual Result<double> forward_backward(std::span<const int32_t> tokens,
                                          std::span<const int32_t> targets, int64_t b, int64_t t,
                                          const BackwardOptions& options = {}) = 0;
  // Forward only (evaluation).
  virtual Result<double> loss(std::span<const int32_t> tokens, std::span<const int32_t> targets,
                              int64_t b, int64_t t) = 0;
  // The groups of parameter indices on_grads_ready reports, in the order it reports them; every
  // parameter appears exactly once.
  virtual const std::vector<std::vector<int>>& grads_ready_order() const = 0;
  // Global gradient L2 norm of the replica: sharded gradients summed over ranks, copies skipped,
  // replicated ones counted once.
  virtual Result<double> grad_norm() = 0;
  // The routed load of the last forward (forward_backward or loss): the busiest expert's routed
  // tokens over the mean per expert (top_k x tokens / experts), the largest over the layers.
  // ntp's routers never drop a token (no capacity bound), so this is the capacity factor a
  // router with a token capacity would need to drop none; 1.0 is perfectly even routing. 0 for a
  // model without a router.
  virtual double routed_load_peak() const { return 0.0; }
  // Tokens the router sent to each expert in the last forward, summed over the layers (an
  // expert is one unit of the experts space: its tensors in every layer). Empty without a router.
  virtual std::vector<double> routed_tokens_per_expert() const { return {}; }

  // How a MoE model's tokens meet the experts held by the other ranks of its TP group
  // (model/expert_dispatch.h). kAllReduce, the default, is accepted by every model;
  // kAllToAll only by a MoE model without shared experts (kInvalidArgument otherwise).
  virtual Status set_expert_dispatch(ExpertDispatch dispatch);

  // The input precision of every matrix product of forward_backward and loss (kernels/cpu/
  // matmul.h): kFp32 (the default) or kBf16 (weights and activations rounded to bf16 as the
  // products read them, float32 sums). Parameters, gradients and everything else stay float32.
  void set_matmul_dtype(kernels::cpu::MatmulDtype dtype) { matmul_dtype_ = dtype; }
  kernels::cpu::MatmulDtype matmul_dtype() const { return matmul_dtype_; }

 protected:
  Model(Model&&) = default;
  Model& operator=(Model&&) = default;

 private:
  kernels::cpu::MatmulDtype matmul_dtype_ = kernels::cpu::MatmulDtype::kFp32;
};

}  // namespace ntp::model
