// A plain float64 Llama forward and loss, written from Hugging Face transformers'
// LlamaForCausalLM (modeling_llama.py) and independent of src/model and src/kernels: naive loops,
// logical tensors addressed by their Hugging Face names and [out, in] nn.Linear layout. RMSNorm,
// the causal attention and the cross-entropy are the kernel tests' float64 references
// (tests/kernels/reference.h).
//
//   x = embed_tokens[tokens]
//   per layer:  h = rmsnorm(x) * input_layernorm
//               q = h Wq^T, k = h Wk^T, v = h Wv^T   (heads of head_dim)
//               q, k = q cos + rotate_half(q) sin, k likewise  (rotate_half(u) = [-u2, u1])
//               query head j attends with KV head j / (n_head / n_kv_head) (repeat_kv), causal,
//               scores / sqrt(head_dim)
//               x = x + attn Wo^T
//               h = rmsnorm(x) * post_attention_layernorm
//               x = x + (silu(h Wgate^T) * (h Wup^T)) Wdown^T
//   logits = (rmsnorm(x) * norm) lm_head^T;  loss = mean cross-entropy
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "model/llama_config.h"
#include "reference.h"  // tests/kernels: float64 RMSNorm, attention, cross-entropy

namespace ntp::model::reference {

using Weights = std::map<std::string, std::vector<double>>;

namespace detail {

// y[n, out] = x[n, in] W^T with W [out, in]
inline std::vector<double> linear(const std::vector<double>& x, const std::vector<double>& w,
                                  int64_t n, int64_t in, int64_t out) {
  std::vector<double> y(static_cast<size_t>(n * out), 0.0);
  for (int64_t i = 0; i < n; ++i)
    for (int64_t o = 0; o < out; ++o) {
      double s = 0.0;
      for (int64_t k = 0; k < in; ++k) s += x[i * in + k] * w[o * in + k];
      y[i * out + o] = s;
    }
  return y;
}

using kernels::reference::rmsnorm;

// In place on x[b, t, heads * d]: position of token (b, i) is i.
inline void rotary(std::vector<double>& x, int64_t bsz, int64_t t, int64_t heads, int64_t d,
                   double theta) {
  const int64_t half = d / 2;
  std::vector<double> u(static_cast<size_t>(d));
  for (int64_t b = 0; b < bsz; ++b)
    for (int64_t i = 0; i < t; ++i)
      for (int64_t hh = 0; hh < heads; ++hh) {
        double* p = x.data() + ((b * t + i) * heads + hh) * d;
        for (int64_t e = 0; e < d; ++e) u[e] = p[e];
        for (int64_t e = 0; e < d; ++e) {
          // emb = cat(freqs, freqs): element e uses frequency e mod d/2.
          const double inv_freq =
              1.0 / std::pow(theta, static_cast<double>(2 * (e % half)) / static_cast<double>(d));
          const double angle = static_cast<double>(i) * inv_freq;
          const double rot = e < half ? -u[e + half] : u[e - half];
          p[e] = u[e] * std::cos(angle) + rot * std::sin(angle);
        }
      }
}

// x[n, c] = embed_tokens rows of tokens.
inline std::vector<double> embed(const LlamaConfig& cfg, const Weights& wts,
                                 const std::vector<int32_t>& tokens) {
  const int64_t n = static_cast<int64_t>(tokens.size()), c = cfg.n_embd;
  const std::vector<double>& e = wts.at("model.embed_tokens.weight");
  std::vector<double> x(static_cast<size_t>(n * c));
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < c; ++j) x[i * c + j] = e[tokens[i] * c + j];
  return x;
}

// x += attention(rmsnorm(x) * input_layernorm) of the layer whose names start with p.
inline void attention_residual(const LlamaConfig& cfg, const Weights& wts, const std::string& p,
                               std::vector<double>& x, int64_t bsz, int64_t t) {
  const int64_t n = bsz * t, c = cfg.n_embd, d = cfg.dim(), nh = cfg.n_head;
  const int64_t nkv = cfg.n_kv_head;
  auto W = [&](const std::string& name) -> const std::vector<double>& { return wts.at(name); };
  std::vector<double> h = rmsnorm(x, W(p + "input_layernorm.weight"), n, c, cfg.rms_norm_eps);
  std::vector<double> q = linear(h, W(p + "self_attn.q_proj.weight"), n, c, nh * d);
  std::vector<double> k = linear(h, W(p + "self_attn.k_proj.weight"), n, c, nkv * d);
  std::vector<double> vv = linear(h, W(p + "self_attn.v_proj.weight"), n, c, nkv * d);
  rotary(q, bsz, t, nh, d, cfg.rope_theta);
  rotary(k, bsz, t, nkv, d, cfg.rope_theta);
  const std::vector<double> att =
      kernels::reference::causal_attention(q, k, vv, bsz, t, nh, nkv, d);
  std::vector<double> o = linear(att, W(p + "self_attn.o_proj.weight"), n, nh * d, c);
  for (size_t i = 0; i < x.size(); ++i) x[i] += o[i];
}

// Mean cross-entropy of targets given the last layer's output x[n, c] (final norm, lm_head).
inline double head_loss(const LlamaConfig& cfg, const Weights& wts, const std::vector<double>& x,
                        const std::vector<int32_t>& targets) {
  const int64_t n = static_cast<int64_t>(targets.size()), c = cfg.n_embd, v = cfg.vocab_size;
  std::vector<double> h = rmsnorm(x, wts.at("model.norm.weight"), n, c, cfg.rms_norm_eps);
  std::vector<double> logits = linear(h, wts.at("lm_head.weight"), n, c, v);
  return kernels::reference::cross_entropy_sum(logits, targets, n, v) / static_cast<double>(n);
}

}  // namespace detail

// Mean cross-entropy (nats) of targets given tokens, both [bsz, t].
inline double llama_loss(const LlamaConfig& cfg, const Weights& wts,
                         const std::vector<int32_t>& tokens, const std::vector<int32_t>& targets,
                         int64_t bsz, int64_t t) {
  using detail::linear;
  const int64_t n = bsz * t, c = cfg.n_embd, f = cfg.ffn();
  auto W = [&](const std::string& name) -> const std::vector<double>& { return wts.at(name); };
  std::vector<double> x = detail::embed(cfg, wts, tokens);
  for (int64_t l = 0; l < cfg.n_layer; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    detail::attention_residual(cfg, wts, p, x, bsz, t);
    std::vector<double> h =
        detail::rmsnorm(x, W(p + "post_attention_layernorm.weight"), n, c, cfg.rms_norm_eps);
    std::vector<double> gate = linear(h, W(p + "mlp.gate_proj.weight"), n, c, f);
    std::vector<double> up = linear(h, W(p + "mlp.up_proj.weight"), n, c, f);
    for (size_t i = 0; i < gate.size(); ++i) gate[i] = gate[i] / (1.0 + std::exp(-gate[i])) * up[i];
    std::vector<double> down = linear(gate, W(p + "mlp.down_proj.weight"), n, f, c);
    for (size_t i = 0; i < x.size(); ++i) x[i] += down[i];
  }
  return detail::head_loss(cfg, wts, x, targets);
}

}  // namespace ntp::model::reference
