// A plain float64 Mixture-of-Experts block, written from Hugging Face transformers'
// MixtralSparseMoeBlock and load_balancing_loss_func (modeling_mixtral.py) plus DeepSeek-style
// shared experts, independent of src/model and src/kernels: naive loops, logical tensors
// addressed by their Hugging Face names in nn.Linear [out, in] layout.
//
//   probs[t]  = softmax(h[t] Wgate^T) over the E experts
//   top-k     the k largest probs of each token (ties: the lower expert id), weights = those
//             probs / their sum when normalize_top_k
//   y[t]      = sum_{e in top-k(t)} weight[t, e] * w2(silu(w1 h[t]) * w3 h[t])
//             + sum over the n_shared shared experts s of the same SwiGLU with rows
//               [s ffn, (s + 1) ffn) of the fused shared_experts tensors, weight 1
//   aux       = E * sum_e (count_e / n) * mean_t probs[t, e]   (count_e: top-k hits of e)
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <map>
#include <string>
#include <vector>

#include "model/moe_block.h"

namespace ntp::model::moe_reference {

using Weights = std::map<std::string, std::vector<double>>;

struct Output {
  std::vector<double> y;  // [n, hidden]
  double aux = 0.0;
  std::vector<int64_t> counts;    // [E]
  std::vector<int64_t> selected;  // [n, k], descending probability
  // Smallest gap, over tokens, between the k-th and the (k+1)-th largest router logit (+inf when
  // k = E): a perturbation moving no logit by this much leaves every top-k set unchanged.
  double min_gap = std::numeric_limits<double>::infinity();
};

namespace detail {

// One SwiGLU expert on one token: rows [r0, r0 + f) of w1, w3 [*, hidden], the matching columns
// of w2 [hidden, ld2]; adds scale * result to out[hidden].
inline void swiglu_add(const std::vector<double>& w1, const std::vector<double>& w3,
                       const std::vector<double>& w2, int64_t r0, int64_t f, int64_t ld2,
                       const double* x, int64_t c, double scale, double* out) {
  for (int64_t j = 0; j < f; ++j) {
    double g = 0.0, u = 0.0;
    for (int64_t i = 0; i < c; ++i) {
      g += w1[(r0 + j) * c + i] * x[i];
      u += w3[(r0 + j) * c + i] * x[i];
    }
    const double s = g / (1.0 + std::exp(-g)) * u;
    for (int64_t i = 0; i < c; ++i) out[i] += scale * w2[i * ld2 + r0 + j] * s;
  }
}

}  // namespace detail

inline Output moe_forward(const MoeConfig& cfg, const Weights& wts, const std::vector<double>& h,
                          int64_t n, const std::string& prefix = "") {
  const int64_t c = cfg.hidden, f = cfg.ffn, ne = cfg.n_experts, k = cfg.top_k;
  const std::string p = prefix + "block_sparse_moe.";
  const std::vector<double>& gate = wts.at(p + "gate.weight");
  Output o;
  o.y.assign(static_cast<size_t>(n * c), 0.0);
  o.counts.assign(static_cast<size_t>(ne), 0);
  std::vector<double> mean_p(static_cast<size_t>(ne), 0.0);
  for (int64_t t = 0; t < n; ++t) {
    const double* x = h.data() + t * c;
    std::vector<double> logit(static_cast<size_t>(ne)), prob(static_cast<size_t>(ne));
    double mx = -1e300;
    for (int64_t e = 0; e < ne; ++e) {
      double s = 0.0;
      for (int64_t i = 0; i < c; ++i) s += gate[e * c + i] * x[i];
      logit[e] = s;
      mx = std::max(mx, s);
    }
    double z = 0.0;
    for (int64_t e = 0; e < ne; ++e) z += std::exp(logit[e] - mx);
    for (int64_t e = 0; e < ne; ++e) {
      prob[e] = std::exp(logit[e] - mx) / z;
      mean_p[e] += prob[e] / static_cast<double>(n);
    }
    // Selection by repeated arg-max (strict >, scanning up: the lower id wins a tie).
    std::vector<bool> taken(static_cast<size_t>(ne), false);
    std::vector<int64_t> sel;
    for (int64_t j = 0; j < k; ++j) {
      int64_t best = -1;
      for (int64_t e = 0; e < ne; ++e) {
        if (!taken[e] && (best < 0 || prob[e] > prob[best])) best = e;
      }
      taken[best] = true;
      sel.push_back(best);
    }
    if (k < ne) {
      double kth = std::numeric_limits<double>::infinity(), next = -1e300;
      for (int64_t e = 0; e < ne; ++e) {
        if (taken[e]) kth = std::min(kth, logit[e]);
        if (!taken[e]) next = std::max(next, logit[e]);
      }
      o.min_gap = std::min(o.min_gap, kth - next);
    }
    double sum = 0.0;
    for (int64_t e : sel) sum += prob[e];
    for (int64_t e : sel) {
      o.selected.push_back(e);
      ++o.counts[e];
      const double weight = cfg.normalize_top_k ? prob[e] / sum : prob[e];
      const std::string ep = p + "experts." + std::to_string(e) + ".";
      detail::swiglu_add(wts.at(ep + "w1.weight"), wts.at(ep + "w3.weight"),
                         wts.at(ep + "w2.weight"), 0, f, f, x, c, weight, o.y.data() + t * c);
    }
    for (int64_t s = 0; s < cfg.n_shared; ++s) {
      detail::swiglu_add(wts.at(p + "shared_experts.gate_proj.weight"),
                         wts.at(p + "shared_experts.up_proj.weight"),
                         wts.at(p + "shared_experts.down_proj.weight"), s * f, f, cfg.n_shared * f,
                         x, c, 1.0, o.y.data() + t * c);
    }
  }
  for (int64_t e = 0; e < ne; ++e) {
    o.aux += static_cast<double>(o.counts[e]) / static_cast<double>(n) * mean_p[e];
  }
  o.aux *= static_cast<double>(ne);
  return o;
}

// The scalar the gradient tests differentiate: sum(y * r) + coef * aux.
inline double moe_loss(const MoeConfig& cfg, const Weights& wts, const std::vector<double>& h,
                       int64_t n, const std::vector<double>& r, double coef) {
  const Output o = moe_forward(cfg, wts, h, n);
  double l = 0.0;
  for (size_t i = 0; i < o.y.size(); ++i) l += o.y[i] * r[i];
  return l + coef * o.aux;
}

}  // namespace ntp::model::moe_reference
