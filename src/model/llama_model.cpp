#include "model/llama_model.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <utility>

#include "kernels/cpu/attention.h"
#include "kernels/cpu/clip.h"
#include "kernels/cpu/cross_entropy.h"
#include "kernels/cpu/embedding.h"
#include "kernels/cpu/gemm.h"
#include "kernels/cpu/parallel.h"
#include "kernels/cpu/rmsnorm.h"
#include "kernels/cpu/rope.h"
#include "kernels/cpu/swiglu.h"
#include "model/init.h"

namespace ntp::model {

namespace k = ntp::kernels::cpu;

namespace {

void resize(std::vector<float>& v, int64_t n) { v.resize(static_cast<size_t>(n)); }

bool ends_with(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

// Hugging Face LlamaPreTrainedModel's scheme: every Linear and Embedding weight ~ N(0,
// initializer_range = 0.02), RMSNorm weights 1. A function of (seed, name, logical index) only
// (model/init.h), so every layout starts from the same logical weights.
InitRule llama_init_rule(std::string_view name) {
  if (ends_with(name, "norm.weight")) return {InitRule::Kind::kOnes, 0.0};
  return {InitRule::Kind::kNormal, 0.02};
}

using k::matmul_nn;
using k::matmul_nt;
using k::matmul_tn;

}  // namespace

LlamaModel::LlamaModel(LlamaConfig config, LlamaShard shard, TpGroup* group)
    : TpModel(group), config_(config), shard_(std::move(shard)) {}

Result<LlamaModel> LlamaModel::create(const LlamaConfig& config, LlamaShard shard, uint64_t seed,
                                      TpGroup* group, bool initialize) {
  LlamaModel m(config, std::move(shard), group);
  NTP_RETURN_IF_ERROR(build(m, seed, initialize));
  return m;
}

std::vector<int> LlamaModel::add_ffn_params(int64_t /*layer*/, const std::string& prefix) {
  return add_dense_ffn_params(prefix + "mlp.");
}

std::vector<int> LlamaModel::add_dense_ffn_params(const std::string& prefix) {
  const int64_t c = config_.n_embd, f = config_.ffn(), unit = config_.ffn_unit;
  std::vector<int64_t> ffn_rows;
  append_unit_slices(shard_.ffn_units, unit, 0, ffn_rows);
  // [outer, units, inner] views (model/param.h); nn.Linear weights are [out, in].
  const Sharding gate_up_w{0, ffn_rows, UnitSpaceId::kFfn, 1, unit * c};
  const Sharding down_w{1, ffn_rows, UnitSpaceId::kFfn, c, unit};
  return {add_param(prefix + "gate_proj.weight", {f, c}, gate_up_w),
          add_param(prefix + "up_proj.weight", {f, c}, gate_up_w),
          add_param(prefix + "down_proj.weight", {c, f}, down_w)};
}

Status LlamaModel::build(LlamaModel& m, uint64_t seed, bool initialize) {
  const LlamaConfig& config = m.config_;
  NTP_RETURN_IF_ERROR(config.validate());
  NTP_RETURN_IF_ERROR(validate_shard(config, m.shard_));
  const int64_t c = config.n_embd, d = config.dim();
  const int64_t nh = config.n_head, nkv = config.n_kv_head, v = config.vocab_size;
  m.kv_groups_ = model::kv_groups(config, m.shard_);
  for (int64_t h : m.shard_.heads) {
    const auto it = std::find(m.kv_groups_.begin(), m.kv_groups_.end(), config.kv_group(h));
    m.head_group_.push_back(it - m.kv_groups_.begin());
  }

  // Logical row / column indices of the shard's units.
  std::vector<int64_t> head_rows, kv_rows;
  append_unit_slices(m.shard_.heads, d, 0, head_rows);
  append_unit_slices(m.kv_groups_, d, 0, kv_rows);
  using S = UnitSpaceId;
  const Sharding replicated;
  // [outer, units, inner] views (model/param.h); nn.Linear weights are [out, in].
  const Sharding q_w{0, head_rows, S::kHeads, 1, d * c};
  const Sharding kv_w{0, kv_rows, S::kKvGroups, 1, d * c};
  const Sharding o_w{1, head_rows, S::kHeads, c, d};
  std::vector<uint8_t> kv_copy;
  for (int64_t g : m.kv_groups_) kv_copy.push_back(owns_kv_group(config, m.shard_, g) ? 0 : 1);

  m.embed_ = m.add_param("model.embed_tokens.weight", {v, c},
                         Sharding{0, m.shard_.vocab_rows, S::kVocab, 1, c});
  for (int64_t l = 0; l < config.n_layer; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    LayerParams lp{};
    lp.ln1 = m.add_param(p + "input_layernorm.weight", {c}, replicated);
    lp.q = m.add_param(p + "self_attn.q_proj.weight", {nh * d, c}, q_w);
    lp.k = m.add_param(p + "self_attn.k_proj.weight", {nkv * d, c}, kv_w);
    lp.v = m.add_param(p + "self_attn.v_proj.weight", {nkv * d, c}, kv_w);
    lp.o = m.add_param(p + "self_attn.o_proj.weight", {c, nh * d}, o_w);
    lp.ln2 = m.add_param(p + "post_attention_layernorm.weight", {c}, replicated);
    lp.ffn = m.add_ffn_params(l, p);
    m.params_[static_cast<size_t>(lp.k)].unit_copy = kv_copy;
    m.params_[static_cast<size_t>(lp.v)].unit_copy = kv_copy;
    m.layers_.push_back(lp);
  }
  m.norm_ = m.add_param("model.norm.weight", {c}, replicated);
  m.lm_head_ =
      m.add_param("lm_head.weight", {v, c}, Sharding{0, m.shard_.head_rows, S::kHeadRows, 1, c});
  for (Param& param : m.params_) {
    param.value = Tensor(param.local_shape());
    param.grad = Tensor(param.local_shape());
    if (!initialize) continue;
    const InitRule rule = llama_init_rule(param.name);
    for (int64_t i = 0; i < param.value.numel(); ++i) {
      param.value[i] = init_value(seed, param.name, param.logical_offset(i), rule);
    }
  }
  m.ready_groups_.push_back({m.lm_head_, m.norm_});
  for (auto lp = m.layers_.rbegin(); lp != m.layers_.rend(); ++lp) {
    std::vector<int> group{lp->ln1, lp->q, lp->k, lp->v, lp->o, lp->ln2};
    group.insert(group.end(), lp->ffn.begin(), lp->ffn.end());
    m.ready_groups_.push_back(std::move(group));
  }
  m.ready_groups_.push_back({m.embed_});
  m.vocab_local_ = k::make_local_index(m.shard_.vocab_rows, v);
  m.head_local_ = k::make_local_index(m.shard_.head_rows, v);
  resize(m.rope_cos_, config.n_ctx * d / 2);
  resize(m.rope_sin_, config.n_ctx * d / 2);
  k::rope_tables(config.n_ctx, d, config.rope_theta, m.rope_cos_.data(), m.rope_sin_.data());
  m.acts_.resize(static_cast<size_t>(config.n_layer));
  return ok_status();
}

Status LlamaModel::find_shared_kv_groups() {
  if (shared_known_) return ok_status();
  // holders[g] = number of ranks holding group g (small integers: exact in float).
  std::vector<float> holders(static_cast<size_t>(config_.n_kv_head), 0.0f);
  for (int64_t g : kv_groups_) holders[static_cast<size_t>(g)] = 1.0f;
  NTP_RETURN_IF_ERROR(all_reduce(holders));
  // Slots in ascending group order: the same on every rank.
  std::vector<int64_t> slot(holders.size(), -1);
  n_shared_ = 0;
  for (size_t g = 0; g < holders.size(); ++g) {
    if (holders[g] >= 2.0f) slot[g] = n_shared_++;
  }
  shared_slot_.clear();
  for (int64_t g : kv_groups_) shared_slot_.push_back(slot[static_cast<size_t>(g)]);
  shared_known_ = true;
  return ok_status();
}

LlamaModel::Dims LlamaModel::dims(int64_t b, int64_t t) const {
  Dims m;
  m.b = b, m.t = t, m.n = b * t, m.c = config_.n_embd, m.d = config_.dim();
  m.hl = static_cast<int64_t>(shard_.heads.size());
  m.gl = static_cast<int64_t>(kv_groups_.size());
  m.qd = m.hl * m.d, m.kd = m.gl * m.d, m.row = 3 * m.qd;
  m.fl = static_cast<int64_t>(shard_.ffn_units.size()) * config_.ffn_unit;
  m.vl = static_cast<int64_t>(shard_.vocab_rows.size());
  m.vh = static_cast<int64_t>(shard_.head_rows.size());
  m.dtype = matmul_dtype();
  return m;
}

Status LlamaModel::row_parallel_residual(const Dims& m, const float* xin, int64_t in, int weight,
                                         const std::vector<float>& residual,
                                         std::vector<float>& z) {
  z = residual;
  if (group().size() == 1) {
    matmul_nt(m.dtype, m.n, m.c, in, xin, in, w(weight), in, 1.0f, z.data(), m.c);
    return ok_status();
  }
  std::vector<float>& y = scratch_.y;
  resize(y, m.n * m.c);
  matmul_nt(m.dtype, m.n, m.c, in, xin, in, w(weight), in, 0.0f, y.data(), m.c);
  NTP_RETURN_IF_ERROR(all_reduce(y));
  for (int64_t i = 0; i < m.n * m.c; ++i) z[i] += y[i];
  return ok_status();
}

Status LlamaModel::forward_attention(size_t l, const Dims& m) {
  const LayerParams& p = layers_[l];
  LayerActs& a = acts_[l];
  const int64_t n = m.n, c = m.c, d = m.d, qd = m.qd, kd = m.kd, row = m.row;
  std::vector<float>& kv = scratch_.dkv;  // this layer's K|V [n, 2 kd] before the per-head copy
  resize(a.h1, n * c), resize(a.rstd1, n), resize(a.qkv, n * row), resize(a.lse, m.b * m.hl * m.t);
  resize(a.att, n * qd), resize(kv, n * 2 * kd);
  k::rmsnorm_forward(a.x_in.data(), w(p.ln1), n, c, static_cast<float>(config_.rms_norm_eps),
                     a.h1.data(), a.rstd1.data());
  matmul_nt(m.dtype, n, qd, c, a.h1.data(), c, w(p.q), c, 0.0f, a.qkv.data(), row);
  matmul_nt(m.dtype, n, kd, c, a.h1.data(), c, w(p.k), c, 0.0f, kv.data(), 2 * kd);
  matmul_nt(m.dtype, n, kd, c, a.h1.data(), c, w(p.v), c, 0.0f, kv.data() + kd, 2 * kd);
  k::rope_forward(a.qkv.data(), m.b, m.t, m.hl, d, row, rope_cos_.data(), rope_sin_.data());
  k::rope_forward(kv.data(), m.b, m.t, m.gl, d, 2 * kd, rope_cos_.data(), rope_sin_.data());
  // Each local query head reads its group's K and V (Hugging Face's repeat_kv).
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t j = 0; j < m.hl; ++j) {
      const float* src = kv.data() + i * 2 * kd + head_group_[static_cast<size_t>(j)] * d;
      std::copy(src, src + d, a.qkv.data() + i * row + qd + j * d);
      std::copy(src + kd, src + kd + d, a.qkv.data() + i * row + 2 * qd + j * d);
    }
  }
  k::attention_forward(a.qkv.data(), m.b, m.t, m.hl, d, a.att.data(), a.lse.data(), m.dtype);
  return row_parallel_residual(m, a.att.data(), qd, p.o, a.x_in, a.x_mid);
}

Status LlamaModel::forward_ffn(size_t l, const Dims& m, std::vector<float>& x_out) {
  LayerActs& a = acts_[l];
  resize(a.h2, m.n * m.c), resize(a.rstd2, m.n);
  k::rmsnorm_forward(a.x_mid.data(), w(layers_[l].ln2), m.n, m.c,
                     static_cast<float>(config_.rms_norm_eps), a.h2.data(), a.rstd2.data());
  return ffn_forward(l, m, x_out);
}

void LlamaModel::dense_ffn_hidden(size_t l, const Dims& m, const int* p) {
  LayerActs& a = acts_[l];
  const int64_t n = m.n, c = m.c, fl = m.fl;
  resize(a.gu, n * 2 * fl), resize(a.s, n * fl);
  matmul_nt(m.dtype, n, fl, c, a.h2.data(), c, w(p[0]), c, 0.0f, a.gu.data(), 2 * fl);
  matmul_nt(m.dtype, n, fl, c, a.h2.data(), c, w(p[1]), c, 0.0f, a.gu.data() + fl, 2 * fl);
  k::swiglu_forward(a.gu.data(), n, fl, a.s.data());
}

void LlamaModel::dense_ffn_output(size_t l, const Dims& m, const int* p, float* y) {
  matmul_nt(m.dtype, m.n, m.c, m.fl, acts_[l].s.data(), m.fl, w(p[2]), m.fl, 1.0f, y, m.c);
}

Status LlamaModel::ffn_forward(size_t l, const Dims& m, std::vector<float>& x_out) {
  const std::vector<int>& p = layers_[l].ffn;  // gate, up, down
  dense_ffn_hidden(l, m, p.data());
  return row_parallel_residual(m, acts_[l].s.data(), m.fl, p[2], acts_[l].x_mid, x_out);
}

double LlamaModel::ffn_loss(const Dims& /*m*/) { return 0.0; }

Status LlamaModel::backward_ffn(size_t l, const Dims& m) {
  LayerActs& a = acts_[l];
  NTP_ASSIGN_OR_RETURN(const float* dh, ffn_backward(l, m));
  k::rmsnorm_backward(a.x_mid.data(), w(layers_[l].ln2), a.rstd2.data(), dh, m.n, m.c,
                      scratch_.dx.data(), dw(layers_[l].ln2), /*accumulate_dx=*/true);
  return ok_status();
}

Result<const float*> LlamaModel::ffn_backward(size_t l, const Dims& m) {
  float* dh = scratch_.reduce.data();
  dense_ffn_backward(l, m, layers_[l].ffn.data(), 0.0f, dh);
  NTP_RETURN_IF_ERROR(all_reduce(std::span<float>(dh, static_cast<size_t>(m.n * m.c))));
  return static_cast<const float*>(dh);
}

void LlamaModel::dense_ffn_backward(size_t l, const Dims& m, const int* p, float beta, float* dh) {
  LayerActs& a = acts_[l];
  const int64_t n = m.n, c = m.c, fl = m.fl;
  std::vector<float>& dx = scratch_.dx;
  std::vector<float>& ds = scratch_.ds;
  std::vector<float>& dgu = scratch_.dgu;
  resize(ds, n * fl), resize(dgu, n * 2 * fl);
  matmul_nn(m.dtype, n, fl, c, dx.data(), c, w(p[2]), fl, 0.0f, ds.data(), fl);
  matmul_tn(m.dtype, c, fl, n, dx.data(), c, a.s.data(), fl, 1.0f, dw(p[2]), fl);
  k::swiglu_backward(a.gu.data(), ds.data(), n, fl, dgu.data());
  matmul_tn(m.dtype, fl, c, n, dgu.data(), 2 * fl, a.h2.data(), c, 1.0f, dw(p[0]), c);
  matmul_tn(m.dtype, fl, c, n, dgu.data() + fl, 2 * fl, a.h2.data(), c, 1.0f, dw(p[1]), c);
  matmul_nn(m.dtype, n, c, fl, dgu.data(), 2 * fl, w(p[0]), c, beta, dh, c);
  matmul_nn(m.dtype, n, c, fl, dgu.data() + fl, 2 * fl, w(p[1]), c, 1.0f, dh, c);
}

Status LlamaModel::backward_attention(size_t l, const Dims& m) {
  const LayerParams& p = layers_[l];
  LayerActs& a = acts_[l];
  const int64_t n = m.n, c = m.c, d = m.d, qd = m.qd, kd = m.kd, row = m.row;
  std::vector<float>& dx = scratch_.dx;
  std::vector<float>& datt = scratch_.datt;
  std::vector<float>& dqkv = scratch_.dqkv;
  std::vector<float>& dkv = scratch_.dkv;
  std::vector<float>& red = scratch_.reduce;  // [dh | shared K/V weight gradients], see run()
  float* dh = red.data();
  resize(datt, n * qd), resize(dqkv, n * row), resize(dkv, n * 2 * kd);
  matmul_nn(m.dtype, n, qd, c, dx.data(), c, w(p.o), qd, 0.0f, datt.data(), qd);
  matmul_tn(m.dtype, c, qd, n, dx.data(), c, a.att.data(), qd, 1.0f, dw(p.o), qd);
  k::attention_backward(a.qkv.data(), a.lse.data(), datt.data(), m.b, m.t, m.hl, d, dqkv.data(),
                        m.dtype);
  // A group's K/V gradient is the sum over the local query heads reading it.
  std::fill(dkv.begin(), dkv.end(), 0.0f);
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t j = 0; j < m.hl; ++j) {
      const float* dk = dqkv.data() + i * row + qd + j * d;
      const float* dv = dk + qd;
      float* gk = dkv.data() + i * 2 * kd + head_group_[static_cast<size_t>(j)] * d;
      float* gv = gk + kd;
      for (int64_t e = 0; e < d; ++e) gk[e] += dk[e], gv[e] += dv[e];
    }
  }
  k::rope_backward(dqkv.data(), m.b, m.t, m.hl, d, row, rope_cos_.data(), rope_sin_.data());
  k::rope_backward(dkv.data(), m.b, m.t, m.gl, d, 2 * kd, rope_cos_.data(), rope_sin_.data());
  matmul_tn(m.dtype, qd, c, n, dqkv.data(), row, a.h1.data(), c, 1.0f, dw(p.q), c);
  // K/V weight gradients: straight into Param::grad for groups only this rank holds; into the
  // reduction buffer (this call's part only, so accumulation over calls stays exact) for shared
  // ones. A run of consecutive groups only this rank holds is one product per part (their rows
  // are adjacent in both dkv and the gradient): with no shared group, one product for all of K.
  std::fill(red.begin() + n * c, red.end(), 0.0f);
  for (int64_t gi = 0; gi < m.gl;) {
    const int64_t slot = shared_slot_[static_cast<size_t>(gi)];
    int64_t end = gi + 1;
    while (slot < 0 && end < m.gl && shared_slot_[static_cast<size_t>(end)] < 0) ++end;
    for (int part = 0; part < 2; ++part) {  // K, V
      const float* dy = dkv.data() + part * kd + gi * d;
      if (slot < 0) {
        float* g = dw(part == 0 ? p.k : p.v) + gi * d * c;
        matmul_tn(m.dtype, (end - gi) * d, c, n, dy, 2 * kd, a.h1.data(), c, 1.0f, g, c);
      } else {
        float* g = red.data() + n * c + (slot * 2 + part) * d * c;
        matmul_tn(m.dtype, d, c, n, dy, 2 * kd, a.h1.data(), c, 0.0f, g, c);
      }
    }
    gi = end;
  }
  // Input gradient: the partial dK/dV of shared groups are summed by this same all-reduce.
  matmul_nn(m.dtype, n, c, qd, dqkv.data(), row, w(p.q), c, 0.0f, dh, c);
  matmul_nn(m.dtype, n, c, kd, dkv.data(), 2 * kd, w(p.k), c, 1.0f, dh, c);
  matmul_nn(m.dtype, n, c, kd, dkv.data() + kd, 2 * kd, w(p.v), c, 1.0f, dh, c);
  NTP_RETURN_IF_ERROR(all_reduce(red));
  for (int64_t gi = 0; gi < m.gl; ++gi) {
    const int64_t slot = shared_slot_[static_cast<size_t>(gi)];
    if (slot < 0) continue;
    for (int part = 0; part < 2; ++part) {
      const float* src = red.data() + n * c + (slot * 2 + part) * d * c;
      float* g = dw(part == 0 ? p.k : p.v) + gi * d * c;
      for (int64_t e = 0; e < d * c; ++e) g[e] += src[e];
    }
  }
  k::rmsnorm_backward(a.x_in.data(), w(p.ln1), a.rstd1.data(), dh, n, c, dx.data(), dw(p.ln1),
                      /*accumulate_dx=*/true);
  return ok_status();
}

Result<double> LlamaModel::run(std::span<const int32_t> tokens, std::span<const int32_t> targets,
                               int64_t b, int64_t t, const BackwardOptions* backward) {
  NTP_RETURN_IF_ERROR(check_batch(tokens, targets, b, t, config_.n_ctx, config_.vocab_size));
  if (backward != nullptr) NTP_RETURN_IF_ERROR(find_shared_kv_groups());
  Dims m = dims(b, t);
  if (backward != nullptr) m.loss_scale = backward->loss_scale;
  const int64_t n = m.n, c = m.c, vh = m.vh;
  const float eps = static_cast<float>(config_.rms_norm_eps);

  // ---- forward ----
  // The residual stream lives in the saved activations: layer l reads acts_[l].x_in, writes
  // x_mid, and its output is the next layer's x_in (x_final_ after the last).
  std::vector<float>& x0 = acts_.empty() ? x_final_ : acts_[0].x_in;
  resize(x0, n * c);
  k::embedding_forward(tokens.data(), n, w(embed_), m.vl, c, vocab_local_, x0.data());
  NTP_RETURN_IF_ERROR(all_reduce(x0));
  for (size_t l = 0; l < layers_.size(); ++l) {
    NTP_RETURN_IF_ERROR(forward_attention(l, m));
    NTP_RETURN_IF_ERROR(forward_ffn(l, m, l + 1 < layers_.size() ? acts_[l + 1].x_in : x_final_));
  }
  resize(hf_, n * c), resize(rstdf_, n), resize(logits_, n * vh);
  k::rmsnorm_forward(x_final_.data(), w(norm_), n, c, eps, hf_.data(), rstdf_.data());
  // logits[n, vh] = hf[n, c] * lm_head_local[vh, c]^T
  matmul_nt(m.dtype, n, vh, c, hf_.data(), c, w(lm_head_), c, 0.0f, logits_.data(), vh);

  std::vector<float> gmax, stats;  // global row maxima [n], [exp-sum | target logit] [2n]
  NTP_ASSIGN_OR_RETURN(const double ce,
                       cross_entropy_forward(logits_, n, vh, targets, head_local_, gmax, stats));
  const double loss = ce + ffn_loss(m);
  if (backward == nullptr) return loss;
  size_t next_ready = 0;
  auto grads_ready = [&]() {
    const std::vector<int>& ready = ready_groups_[next_ready++];
    if (backward->on_grads_ready) backward->on_grads_ready(ready);
  };

  // ---- backward ----
  // scratch_.reduce holds [dh (n * c) | per shared KV group: dWk (d * c), dWv (d * c)]: one
  // all-reduce sums the attention block's input gradient and this call's shared K/V weight
  // gradients; the other all-reduces use its first n * c values.
  std::vector<float>& red = scratch_.reduce;
  resize(red, n * c + n_shared_ * 2 * m.d * c);
  float* dh = red.data();
  std::vector<float>& dlogits = scratch_.dlogits;
  resize(dlogits, n * vh);
  k::cross_entropy_backward(logits_.data(), n, vh, targets.data(), head_local_, gmax.data(),
                            stats.data(), backward->loss_scale / static_cast<float>(n),
                            dlogits.data());
  matmul_tn(m.dtype, vh, c, n, dlogits.data(), vh, hf_.data(), c, 1.0f, dw(lm_head_), c);
  matmul_nn(m.dtype, n, c, vh, dlogits.data(), vh, w(lm_head_), c, 0.0f, dh, c);
  NTP_RETURN_IF_ERROR(all_reduce(std::span<float>(dh, static_cast<size_t>(n * c))));
  std::vector<float>& dx = scratch_.dx;
  resize(dx, n * c);
  k::rmsnorm_backward(x_final_.data(), w(norm_), rstdf_.data(), dh, n, c, dx.data(), dw(norm_));
  grads_ready();  // lm_head, model.norm
  // dx: the gradient of the current layer's output, then (through the residuals) of its input.
  for (size_t l = layers_.size(); l-- > 0;) {
    NTP_RETURN_IF_ERROR(backward_ffn(l, m));
    NTP_RETURN_IF_ERROR(backward_attention(l, m));
    grads_ready();  // this layer
  }
  k::embedding_backward(tokens.data(), n, dx.data(), m.vl, c, vocab_local_, dw(embed_));
  grads_ready();  // embed_tokens
  return loss;
}

Result<double> LlamaModel::grad_norm() {
  double sharded_sq = 0.0, replicated_sq = 0.0;
  for (const Param& p : params_) {
    if (p.replicated()) {
      replicated_sq += k::sum_of_squares(p.grad.data(), p.grad.numel());
      continue;
    }
    if (p.unit_copy.empty()) {  // every local unit is this rank's own: one pass
      sharded_sq += k::sum_of_squares(p.grad.data(), p.grad.numel());
      continue;
    }
    // Skip the copies of KV groups another rank owns: each run of owned units is one call (a
    // call per unit would be one per element of a down_proj with ffn_unit 1).
    const int64_t units = p.local_units();
    for (int64_t o = 0; o < p.unit_outer; ++o) {
      for (int64_t u = 0; u < units;) {
        int64_t end = u;
        while (end < units && p.unit_copy[static_cast<size_t>(end)] == 0) ++end;
        if (end > u) {
          sharded_sq += k::sum_of_squares(p.grad.data() + (o * units + u) * p.unit_inner,
                                          (end - u) * p.unit_inner);
        }
        u = end + 1;  // past the run and the copy that ended it (or past the end)
      }
    }
  }
  // float32 all-reduce of the sharded sum: relative rounding 1e-7 is far below any clip concern.
  std::vector<float> sharded(1, static_cast<float>(sharded_sq));
  NTP_RETURN_IF_ERROR(all_reduce(sharded));
  return std::sqrt(static_cast<double>(sharded[0]) + replicated_sq);
}

double LlamaModel::training_flops(const LlamaConfig& config, int64_t b, int64_t t) {
  const double c = static_cast<double>(config.n_embd);
  return decoder_flops(config, 3 * c * static_cast<double>(config.ffn()), b, t);
}

double LlamaModel::decoder_flops(const LlamaConfig& config, double ffn_params, int64_t b,
                                 int64_t t) {
  const double c = static_cast<double>(config.n_embd);
  const double qd = static_cast<double>(config.n_head * config.dim());
  const double kd = static_cast<double>(config.n_kv_head * config.dim());
  const double matmul_params =
      static_cast<double>(config.n_layer) * (2 * c * qd + 2 * c * kd + ffn_params) +
      static_cast<double>(config.vocab_size) * c;
  const double tokens = static_cast<double>(b * t);
  const double attention = 12.0 * static_cast<double>(config.n_layer) * static_cast<double>(t) * qd;
  return tokens * (6.0 * matmul_params + attention);
}

}  // namespace ntp::model
