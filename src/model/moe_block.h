// MoeBlock: a Mixture-of-Experts feed-forward block, float32 (Hugging Face
// MixtralSparseMoeBlock semantics and parameter names, optional DeepSeek-style shared experts),
// for one rank that holds any subset of the routed experts.
//
// For h [n, hidden] (n tokens, row-major):
//   router    logits = h Wr^T (Wr = block_sparse_moe.gate.weight [E, hidden], no bias),
//             probs = softmax(logits) over all E experts
//   top-k     each token's k largest probs (ties: the lower expert id); combine weights = those
//             probs, divided by their sum when normalize_top_k (Mixtral's
//             routing_weights /= routing_weights.sum(-1))
//   experts   expert e(x) = w2( silu(w1 x) * (w3 x) ) (SwiGLU; w1 = gate [ffn, hidden], w3 = up
//             [ffn, hidden], w2 = down [hidden, ffn], nn.Linear [out, in] layout, no biases)
//   shared    n_shared dense SwiGLU experts applied to every token with weight 1, stored fused as
//             one MLP of n_shared * ffn columns (DeepSeek's shared_experts: gate_proj, up_proj,
//             down_proj); their sum equals that MLP's output
//   output    y[t] = sum over t's top-k experts e of weight[t, e] * e(h[t])  +  shared(h[t])
//   aux loss  transformers' load_balancing_loss_func for one layer:
//             aux = E * sum_e f_e * P_e,  f_e = count_e / n (count_e = tokens whose top-k holds e,
//             so sum_e f_e = k: transformers averages its one-hot [n, k, E] over tokens only and
//             sums over k; aux = k for perfectly uniform routing), P_e = mean over tokens of
//             probs[t, e]. f_e is a count: the gradient flows through P_e only.
// Capacity is infinite: no token is ever dropped (every top-k assignment is computed).
//
// Expert parallelism (Megatron's row-parallel pattern, experts as units): every rank sees all n
// tokens and holds the replicated router, plus the routed experts its MoeHolding lists (any
// subset, any order); exactly one rank of the group is the holding's `lead`, which also holds the
// shared experts and adds the aux loss's gradient. Every rank computes the same routing. Then:
//   forward   y is this rank's partial output (its experts' weighted outputs, plus the shared
//             experts' on the lead); the sum over ranks is the block's output. aux and
//             expert_counts() are the full values on every rank.
//   backward  given the full dy (the gradient of the summed output), the rank accumulates the full
//             gradients of the experts it holds (and of the shared experts on the lead), and
//             writes / accumulates PARTIAL sums of dh and of the router gradient: the router's
//             input is <dy[t], e(h[t])> for each selected e, which only the holder of e can form,
//             so each rank back-propagates through the top-k renormalization and the softmax the
//             terms of its own experts (plus the aux term on the lead). Both maps are linear in
//             those terms, so summing dh and gate.weight's gradient over ranks (one all-reduce,
//             the caller's) gives the full ones; after it every rank's router gradient is the same.
// With one rank holding all experts (MoeHolding::all) y, dh and every gradient are the full ones.
//
// Parameters are model::Param (whole tensors: Param::replicated() here means "stored whole", an
// expert's tensors exist only on its holder) named prefix + Hugging Face Mixtral names, in the
// order: block_sparse_moe.gate.weight [E, hidden], per held expert e (holding order)
// block_sparse_moe.experts.{e}.w1.weight, .w2.weight, .w3.weight, then on the lead with
// n_shared > 0 block_sparse_moe.shared_experts.gate_proj.weight [n_shared * ffn, hidden],
// .up_proj.weight, .down_proj.weight [hidden, n_shared * ffn]. Initial values ~ N(0, 0.02)
// (Mixtral's initializer_range), a function of (seed, name, element) only (model/init.h), so
// every holding starts from the same logical weights.
//
// A model that keeps its weights in tensors of its own (MoeModel's stacked expert tensors) makes
// the block with create_view: the block then reads and accumulates into the caller's storage and
// owns no Param.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "kernels/cpu/matmul.h"
#include "model/param.h"

namespace ntp::model {

struct MoeConfig {
  int64_t hidden = 0;     // model width
  int64_t ffn = 0;        // intermediate size of one expert (Mixtral's intermediate_size)
  int64_t n_experts = 8;  // routed experts E (num_local_experts)
  int64_t top_k = 2;      // experts per token (num_experts_per_tok)
  int64_t n_shared = 0;   // shared experts, each ffn wide (0: none)
  bool normalize_top_k = true;

  // kInvalidArgument naming the field: hidden, ffn, n_experts >= 1, 1 <= top_k <= n_experts,
  // n_shared >= 0.
  Status validate() const;
};

// The routed experts one rank holds (distinct ids in [0, n_experts), any order), and whether it
// is the group's lead (holds the shared experts, adds the aux loss's gradient).
struct MoeHolding {
  std::vector<int64_t> experts;
  bool lead = true;

  // Every expert, lead: the whole block on one rank.
  static MoeHolding all(const MoeConfig& config);
};

// kInvalidArgument for an expert id out of range or listed twice.
Status validate_holding(const MoeConfig& config, const MoeHolding& holding);
// A group's holdings: each valid, every expert held by exactly one rank, exactly one lead.
Status validate_holdings(const MoeConfig& config, const std::vector<MoeHolding>& holdings);

class MoeBlock {
 public:
  // With `initialize` false the weights are left zero. Parameter names start with `prefix`
  // (e.g. "model.layers.3.").
  static Result<MoeBlock> create(const MoeConfig& config, MoeHolding holding, uint64_t seed,
                                 std::string_view prefix = "", bool initialize = true);

  // Weight storage owned by the caller: value and gradient of one weight, laid out as the Param
  // of that name would be.
  struct WeightView {
    float* value = nullptr;
    float* grad = nullptr;
  };
  // A block on the caller's storage, one view per weight in the order params() would have (router,
  // per held expert in holding order w1, w2, w3, then on the lead with n_shared > 0 the shared
  // gate_proj, up_proj, down_proj). The storage must outlive the block; params() is empty and
  // zero_grad() does nothing (the caller owns the gradients).
  static Result<MoeBlock> create_view(const MoeConfig& config, MoeHolding holding,
                                      std::vector<WeightView> weights);

  MoeBlock(MoeBlock&&) = default;
  MoeBlock& operator=(MoeBlock&&) = default;

  const MoeConfig& config() const { return config_; }
  const MoeHolding& holding() const { return holding_; }
  // See the top of this file for the order; grads accumulate over backward calls.
  std::vector<Param>& params() { return params_; }
  const std::vector<Param>& params() const { return params_; }
  void zero_grad();
  // The input precision of the experts' matrix products (kernels/cpu/matmul.h): kFp32 (the
  // default) or kBf16, as the model's (model::Model::set_matmul_dtype). The router's product stays
  // float32: its top-k choice is what an input rounding must not flip.
  void set_matmul_dtype(kernels::cpu::MatmulDtype dtype) { dtype_ = dtype; }

  // h [n, hidden] -> y [n, hidden] (overwritten: this rank's partial output); returns aux.
  // Saves what backward needs (h is copied). kInvalidArgument on a size mismatch.
  Result<double> forward(std::span<const float> h, int64_t n, std::span<float> y);
  // Back-propagates L with dL/dy = dy [n, hidden] (n of the last forward) plus aux_coef * aux
  // (Mixtral's router_aux_loss_coef; the aux term only on the lead): dh [n, hidden] overwritten
  // with this rank's partial input gradient, gradients accumulated into Param::grad (see the top
  // for which are partial). kFailedPrecondition without a forward before; kInvalidArgument on a
  // size mismatch.
  Status backward(std::span<const float> dy, double aux_coef, std::span<float> dh);
  // The same with the aux loss's gradient given per expert: on the lead, aux_dprobs[e] [E] is added
  // to dL/dprobs[t, e] for every token t (the f_e of the aux loss are counts: constants). The
  // overload above passes aux_coef * E * count_e / n^2, this layer's own aux; a model whose aux
  // loss spans layers (MoeModel) passes its own.
  Status backward(std::span<const float> dy, std::span<const double> aux_dprobs,
                  std::span<float> dh);
  // ---- The block in parts, for a dispatch that moves tokens between ranks (model/moe_exchange.h:
  // each rank routes its own tokens, the holders run the experts on rows sent to them). ----

  // Routes n tokens h [n, hidden] (the router only; fills probs(), selected(), combine_weights()
  // and expert_counts() for them) and returns their aux (the formula at the top over these n).
  // Saves h for router_backward. kInvalidArgument on a size mismatch.
  Result<double> route(std::span<const float> h, int64_t n);
  // Runs the held experts on m rows: x [m, hidden], expert[r] = the held expert row r is for;
  // out [m, hidden] is overwritten with each row's expert output (no combine weight). Saves the
  // activations for experts_backward. kInvalidArgument for an expert this rank does not hold.
  Status experts_forward(std::span<const float> x, std::span<const int64_t> expert,
                         std::span<float> out);
  // Given dout [m, hidden], the gradient of the last experts_forward's out: accumulates the held
  // experts' weight gradients and overwrites dx [m, hidden] with the rows' input gradient.
  Status experts_backward(std::span<const float> dout, std::span<float> dx);
  // Back-propagates through the last route()'s top-k renormalization and softmax, given
  // dcombine [n, k] (dL/d combine weight per token and slot) and, when add_aux, aux_dprobs [E]
  // added to every token's dL/dprobs[t, e]: accumulates the router gradient and adds the router
  // path's input gradient to dh [n, hidden].
  Status router_backward(std::span<const float> dcombine, std::span<const double> aux_dprobs,
                         bool add_aux, std::span<float> dh);

  // Where the router's gradient accumulates from now on (a view block only; e.g. a buffer the
  // caller sums over ranks before adding it to the parameter's gradient).
  void set_router_grad(float* grad) { weights_[static_cast<size_t>(router_)].grad = grad; }

  // Per expert id [E]: tokens routed to it by the last forward (top-k assignments; sum n * k). The
  // same on every rank (the routing is computed from the replicated router).
  const std::vector<int64_t>& expert_counts() const { return counts_; }
  // Per token [n, top_k] of the last forward: the chosen expert ids (descending probability) and
  // their combine weights.
  const std::vector<int64_t>& selected() const { return selected_; }
  const std::vector<float>& combine_weights() const { return combine_; }
  // Router probabilities [n, E] of the last forward (softmax over all experts).
  const std::vector<float>& probs() const { return probs_; }

 private:
  struct ExpertParams {
    int w1, w2, w3;
  };
  // One held expert's tokens and activations of the last forward (m = its token count).
  struct ExpertActs {
    std::vector<int64_t> token;  // [m] token index, ascending
    std::vector<int64_t> slot;   // [m] position of this expert in the token's top-k
    std::vector<float> x;        // [m, hidden] gathered h rows
    std::vector<float> gu;       // [m, 2 ffn] gate | up pre-activations
    std::vector<float> s;        // [m, ffn] silu(gate) * up
    std::vector<float> out;      // [m, hidden] expert output before the combine weight
  };

  MoeBlock(MoeConfig config, MoeHolding holding);
  int add_param(std::string name, std::vector<int64_t> shape);
  // Indexes router_, experts_ and shared_ in params() order (router 0, then three per expert, ...).
  void assign_indices();
  float* w(int index) { return weights_[static_cast<size_t>(index)].value; }
  float* dw(int index) { return weights_[static_cast<size_t>(index)].grad; }
  // Per held expert j with acts_[j].token set: gathers its rows of `source` (row = token index)
  // into acts_[j].x and runs its SwiGLU (acts_[j].gu, .s, .out).
  void run_held_experts(const float* source);
  // Held expert j's backward for dout_ [m, hidden] (its rows' output gradient, m = its rows):
  // weight gradients accumulated, dx_ [m, hidden] overwritten.
  void held_expert_backward(size_t j);
  // SwiGLU of m rows x [m, hidden] through w1/w3 [f, hidden], w2 [hidden, f]: gu [m, 2f], s [m, f],
  // out [m, hidden] (all overwritten).
  void swiglu_forward(int64_t m, int64_t f, const float* x, int w1, int w3, int w2, float* gu,
                      float* s, float* out);
  // Its backward for dout [m, hidden]: weight gradients accumulated, dx [m, hidden] overwritten.
  void swiglu_backward(int64_t m, int64_t f, const float* x, const float* gu, const float* s,
                       const float* dout, int w1, int w3, int w2, float* dx);

  MoeConfig config_;
  MoeHolding holding_;
  kernels::cpu::MatmulDtype dtype_ = kernels::cpu::MatmulDtype::kFp32;  // the experts' products
  std::vector<Param> params_;                                           // empty for a view block
  std::vector<WeightView> weights_;  // per weight, params() order: params_' storage or the caller's
  int router_ = -1;
  std::vector<ExpertParams> experts_;  // per held expert, holding order
  ExpertParams shared_{-1, -1, -1};    // the lead's shared experts (-1: none)

  int64_t n_ = -1;                           // tokens of the last forward / route (-1: none yet)
  int64_t rows_ = -1;                        // rows of the last experts_forward (-1: none yet)
  std::vector<float> h_;                     // [n, hidden]
  std::vector<float> probs_;                 // [n, E]
  std::vector<int64_t> selected_;            // [n, k]
  std::vector<float> combine_;               // [n, k]
  std::vector<int64_t> counts_;              // [E]
  std::vector<ExpertActs> acts_;             // per held expert
  std::vector<float> shared_gu_, shared_s_;  // [n, 2 fs], [n, fs] (fs = n_shared * ffn)
  std::vector<float> dout_, dx_, ds_, dgu_;  // backward scratch
};

}  // namespace ntp::model
