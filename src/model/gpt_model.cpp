#include "model/gpt_model.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <utility>

#include "kernels/cpu/attention.h"
#include "kernels/cpu/clip.h"
#include "kernels/cpu/cross_entropy.h"
#include "kernels/cpu/embedding.h"
#include "kernels/cpu/gelu.h"
#include "kernels/cpu/gemm.h"
#include "kernels/cpu/layernorm.h"
#include "kernels/cpu/linear.h"
#include "kernels/cpu/parallel.h"
#include "model/init.h"

namespace ntp::model {

namespace k = ntp::kernels::cpu;

namespace {
void resize(std::vector<float>& v, int64_t n) { v.resize(static_cast<size_t>(n)); }
}  // namespace

GptModel::GptModel(GptConfig config, TpShard shard, TpGroup* group)
    : TpModel(group), config_(config), shard_(std::move(shard)) {}

Result<GptModel> GptModel::create(const GptConfig& config, TpShard shard, uint64_t seed,
                                  TpGroup* group, bool initialize) {
  NTP_RETURN_IF_ERROR(config.validate());
  NTP_RETURN_IF_ERROR(validate_shard(config, shard));
  GptModel m(config, std::move(shard), group);
  const int64_t c = config.n_embd, d = config.head_dim(), f = config.ffn();
  const int64_t unit = config.ffn_unit;

  // Logical column / row indices of the shard's units.
  std::vector<int64_t> qkv_cols, head_rows, ffn_cols;
  for (int64_t part = 0; part < 3; ++part)
    append_unit_slices(m.shard_.heads, d, part * c, qkv_cols);
  append_unit_slices(m.shard_.heads, d, 0, head_rows);
  append_unit_slices(m.shard_.ffn_units, unit, 0, ffn_cols);
  using S = UnitSpaceId;
  const Sharding replicated;
  // [outer, units, inner] views of each sharded tensor (model/param.h).
  const Sharding qkv_w{1, qkv_cols, S::kHeads, c * 3, d};
  const Sharding qkv_b{0, qkv_cols, S::kHeads, 3, d};
  const Sharding proj_w{0, head_rows, S::kHeads, 1, d * c};
  const Sharding fc_w{1, ffn_cols, S::kFfn, c, unit};
  const Sharding fc_b{0, ffn_cols, S::kFfn, 1, unit};
  const Sharding fc2_w{0, ffn_cols, S::kFfn, 1, unit * c};
  const Sharding wte{0, m.shard_.vocab_rows, S::kVocab, 1, c};

  m.wte_ = m.add_param("transformer.wte.weight", {config.vocab_size, c}, wte);
  m.wpe_ = m.add_param("transformer.wpe.weight", {config.n_ctx, c}, replicated);
  for (int64_t l = 0; l < config.n_layer; ++l) {
    const std::string p = "transformer.h." + std::to_string(l) + ".";
    LayerParams lp{};
    lp.ln1_w = m.add_param(p + "ln_1.weight", {c}, replicated);
    lp.ln1_b = m.add_param(p + "ln_1.bias", {c}, replicated);
    lp.attn_w = m.add_param(p + "attn.c_attn.weight", {c, 3 * c}, qkv_w);
    lp.attn_b = m.add_param(p + "attn.c_attn.bias", {3 * c}, qkv_b);
    lp.proj_w = m.add_param(p + "attn.c_proj.weight", {c, c}, proj_w);
    lp.proj_b = m.add_param(p + "attn.c_proj.bias", {c}, replicated);
    lp.ln2_w = m.add_param(p + "ln_2.weight", {c}, replicated);
    lp.ln2_b = m.add_param(p + "ln_2.bias", {c}, replicated);
    lp.fc_w = m.add_param(p + "mlp.c_fc.weight", {c, f}, fc_w);
    lp.fc_b = m.add_param(p + "mlp.c_fc.bias", {f}, fc_b);
    lp.fc2_w = m.add_param(p + "mlp.c_proj.weight", {f, c}, fc2_w);
    lp.fc2_b = m.add_param(p + "mlp.c_proj.bias", {c}, replicated);
    m.layers_.push_back(lp);
  }
  m.lnf_w_ = m.add_param("transformer.ln_f.weight", {c}, replicated);
  m.lnf_b_ = m.add_param("transformer.ln_f.bias", {c}, replicated);
  for (Param& param : m.params_) {
    if (initialize) {
      initialize_param(seed, config, param);
    } else {
      param.value = Tensor(param.local_shape());
      param.grad = Tensor(param.local_shape());
    }
  }
  m.ready_groups_.push_back({m.lnf_w_, m.lnf_b_});
  for (auto lp = m.layers_.rbegin(); lp != m.layers_.rend(); ++lp) {
    m.ready_groups_.push_back({lp->ln1_w, lp->ln1_b, lp->attn_w, lp->attn_b, lp->proj_w, lp->proj_b,
                               lp->ln2_w, lp->ln2_b, lp->fc_w, lp->fc_b, lp->fc2_w, lp->fc2_b});
  }
  m.ready_groups_.push_back({m.wte_, m.wpe_});
  m.vocab_local_ = k::make_local_index(m.shard_.vocab_rows, config.vocab_size);
  m.acts_.resize(static_cast<size_t>(config.n_layer));
  return m;
}

Result<double> GptModel::run(std::span<const int32_t> tokens, std::span<const int32_t> targets,
                             int64_t b, int64_t t, const BackwardOptions* backward) {
  NTP_RETURN_IF_ERROR(check_batch(tokens, targets, b, t, config_.n_ctx, config_.vocab_size));
  const int64_t n = b * t, c = config_.n_embd, d = config_.head_dim();
  const int64_t hl = static_cast<int64_t>(shard_.heads.size());
  const int64_t cl = hl * d;
  const k::MatmulDtype dtype = matmul_dtype();
  const int64_t fl = static_cast<int64_t>(shard_.ffn_units.size()) * config_.ffn_unit;
  const int64_t vl = static_cast<int64_t>(shard_.vocab_rows.size());

  // ---- forward ----
  // The residual stream lives in the activations the backward needs anyway: block l reads
  // acts_[l].x_in, writes x_mid, and its output is the next block's x_in (x_final_ after the last).
  std::vector<float>& x0 = acts_.empty() ? x_final_ : acts_[0].x_in;
  resize(x0, n * c);
  k::embedding_forward(tokens.data(), n, w(wte_), vl, c, vocab_local_, x0.data());
  NTP_RETURN_IF_ERROR(all_reduce(x0));
  k::position_forward(w(wpe_), b, t, c, x0.data());

  // out = residual + (all-reduced x * w + bias) of a row-parallel layer; a single rank adds the
  // product straight onto residual + bias (sgemm with beta = 1: no clearing pass, no add pass).
  auto row_parallel_residual = [&](const float* xin, int weight, int bias, const float* residual,
                                   int64_t n_rows, int64_t in, int64_t out, float* z) -> Status {
    if (group().size() == 1) {
      k::linear_forward_residual(xin, w(weight), w(bias), residual, n_rows, in, out, z, dtype);
      return ok_status();
    }
    std::vector<float>& y = scratch_.y;
    resize(y, n_rows * out);
    k::linear_forward(xin, w(weight), nullptr, n_rows, in, out, y.data(), dtype);
    NTP_RETURN_IF_ERROR(all_reduce(y));
    k::add_bias_residual(residual, y.data(), w(bias), n_rows, out, z);
    return ok_status();
  };

  for (size_t l = 0; l < layers_.size(); ++l) {
    const LayerParams& p = layers_[l];
    LayerActs& a = acts_[l];
    std::vector<float>& x_out = l + 1 < layers_.size() ? acts_[l + 1].x_in : x_final_;
    resize(a.h1, n * c), resize(a.mean1, n), resize(a.rstd1, n);
    resize(a.qkv, n * 3 * cl), resize(a.lse, b * hl * t), resize(a.att, n * cl);
    resize(a.x_mid, n * c), resize(a.h2, n * c), resize(a.mean2, n), resize(a.rstd2, n);
    resize(a.f, n * fl), resize(a.g, n * fl), resize(x_out, n * c);

    k::layernorm_forward(a.x_in.data(), w(p.ln1_w), w(p.ln1_b), n, c, a.h1.data(), a.mean1.data(),
                         a.rstd1.data());
    k::linear_forward(a.h1.data(), w(p.attn_w), w(p.attn_b), n, c, 3 * cl, a.qkv.data(), dtype);
    k::attention_forward(a.qkv.data(), b, t, hl, d, a.att.data(), a.lse.data(), dtype);
    NTP_RETURN_IF_ERROR(row_parallel_residual(a.att.data(), p.proj_w, p.proj_b, a.x_in.data(), n,
                                              cl, c, a.x_mid.data()));

    k::layernorm_forward(a.x_mid.data(), w(p.ln2_w), w(p.ln2_b), n, c, a.h2.data(), a.mean2.data(),
                         a.rstd2.data());
    k::linear_forward(a.h2.data(), w(p.fc_w), w(p.fc_b), n, c, fl, a.f.data(), dtype);
    k::gelu_forward(a.f.data(), n * fl, a.g.data());
    NTP_RETURN_IF_ERROR(row_parallel_residual(a.g.data(), p.fc2_w, p.fc2_b, a.x_mid.data(), n, fl,
                                              c, x_out.data()));
  }
  const std::vector<float>& x = x_final_;
  resize(hf_, n * c), resize(meanf_, n), resize(rstdf_, n), resize(logits_, n * vl);
  k::layernorm_forward(x.data(), w(lnf_w_), w(lnf_b_), n, c, hf_.data(), meanf_.data(),
                       rstdf_.data());
  // logits[n, vl] = hf[n, c] * wte_local[vl, c]^T
  k::matmul(dtype, false, true, n, vl, c, 1.0f, hf_.data(), c, w(wte_), c, 0.0f, logits_.data(),
            vl);

  std::vector<float> gmax, stats;  // global row maxima [n], [exp-sum | target logit] [2n]
  NTP_ASSIGN_OR_RETURN(const double loss,
                       cross_entropy_forward(logits_, n, vl, targets, vocab_local_, gmax, stats));
  if (backward == nullptr) return loss;
  size_t next_ready = 0;  // index into ready_groups_
  auto grads_ready = [&]() {
    const std::vector<int>& ready = ready_groups_[next_ready++];
    if (backward->on_grads_ready) backward->on_grads_ready(ready);
  };

  // ---- backward ----
  std::vector<float>& dlogits = scratch_.dlogits;
  resize(dlogits, n * vl);
  k::cross_entropy_backward(logits_.data(), n, vl, targets.data(), vocab_local_, gmax.data(),
                            stats.data(), backward->loss_scale / static_cast<float>(n),
                            dlogits.data());
  // Tied head: dwte_local += dlogits^T hf; dhf = dlogits wte_local (partial over vocabulary).
  k::matmul(dtype, true, false, vl, c, n, 1.0f, dlogits.data(), vl, hf_.data(), c, 1.0f, dw(wte_),
            c);
  std::vector<float>& dh = scratch_.dh;
  resize(dh, n * c);
  k::matmul(dtype, false, false, n, c, vl, 1.0f, dlogits.data(), vl, w(wte_), c, 0.0f, dh.data(),
            c);
  NTP_RETURN_IF_ERROR(all_reduce(dh));
  std::vector<float>& dx = scratch_.dx;
  resize(dx, n * c);
  k::layernorm_backward(x_final_.data(), w(lnf_w_), meanf_.data(), rstdf_.data(), dh.data(), n, c,
                        dx.data(), dw(lnf_w_), dw(lnf_b_));
  grads_ready();  // ln_f

  std::vector<float>& dg = scratch_.dg;
  std::vector<float>& df = scratch_.df;
  std::vector<float>& datt = scratch_.datt;
  std::vector<float>& dqkv = scratch_.dqkv;
  for (size_t li = layers_.size(); li-- > 0;) {
    const LayerParams& p = layers_[li];
    LayerActs& a = acts_[li];
    // MLP: dx is the gradient of the block output (and of x_mid through the residual).
    resize(dg, n * fl), resize(df, n * fl);
    k::linear_backward(a.g.data(), w(p.fc2_w), dx.data(), n, fl, c, dg.data(), dw(p.fc2_w),
                       dw(p.fc2_b), dtype);
    k::gelu_backward_column_sums(a.f.data(), dg.data(), n, fl, df.data(), dw(p.fc_b));
    k::linear_backward(a.h2.data(), w(p.fc_w), df.data(), n, c, fl, dh.data(), dw(p.fc_w), nullptr,
                       dtype);
    NTP_RETURN_IF_ERROR(all_reduce(dh));
    k::layernorm_backward(a.x_mid.data(), w(p.ln2_w), a.mean2.data(), a.rstd2.data(), dh.data(), n,
                          c, dx.data(), dw(p.ln2_w), dw(p.ln2_b), /*accumulate_dx=*/true);
    // Attention.
    resize(datt, n * cl), resize(dqkv, n * 3 * cl);
    k::linear_backward(a.att.data(), w(p.proj_w), dx.data(), n, cl, c, datt.data(), dw(p.proj_w),
                       dw(p.proj_b), dtype);
    k::attention_backward(a.qkv.data(), a.lse.data(), datt.data(), b, t, hl, d, dqkv.data(), dtype);
    k::linear_backward(a.h1.data(), w(p.attn_w), dqkv.data(), n, c, 3 * cl, dh.data(), dw(p.attn_w),
                       dw(p.attn_b), dtype);
    NTP_RETURN_IF_ERROR(all_reduce(dh));
    k::layernorm_backward(a.x_in.data(), w(p.ln1_w), a.mean1.data(), a.rstd1.data(), dh.data(), n,
                          c, dx.data(), dw(p.ln1_w), dw(p.ln1_b), /*accumulate_dx=*/true);
    grads_ready();  // this block
  }
  k::embedding_backward(tokens.data(), n, dx.data(), vl, c, vocab_local_, dw(wte_));
  k::position_backward(dx.data(), b, t, c, dw(wpe_));
  grads_ready();  // wte, wpe
  return loss;
}

Result<double> GptModel::grad_norm() {
  std::vector<float> sharded(1, 0.0f);
  double sharded_sq = 0.0, replicated_sq = 0.0;
  for (const Param& p : params_) {
    const double s = k::sum_of_squares(p.grad.data(), p.grad.numel());
    (p.replicated() ? replicated_sq : sharded_sq) += s;
  }
  // float32 all-reduce of the sharded sum: relative rounding 1e-7 is far below any clip concern.
  sharded[0] = static_cast<float>(sharded_sq);
  NTP_RETURN_IF_ERROR(all_reduce(sharded));
  return std::sqrt(static_cast<double>(sharded[0]) + replicated_sq);
}

double GptModel::training_flops(const GptConfig& config, int64_t b, int64_t t) {
  const double c = static_cast<double>(config.n_embd);
  const double f = static_cast<double>(config.ffn());
  const double matmul_params =
      static_cast<double>(config.n_layer) * (3 * c * c + c * c + 2 * c * f) +
      static_cast<double>(config.vocab_size) * c;
  const double tokens = static_cast<double>(b * t);
  const double attention = 12.0 * static_cast<double>(config.n_layer) * static_cast<double>(t) * c;
  return tokens * (6.0 * matmul_params + attention);
}

}  // namespace ntp::model
