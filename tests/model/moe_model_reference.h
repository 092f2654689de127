// A plain float64 MoE decoder forward and loss (Hugging Face MixtralForCausalLM with labels and
// output_router_logits), independent of src/model and src/kernels: Llama's embedding, attention
// and head from llama_reference.h, each layer's FFN the Mixtral block of moe_reference.h, and the
// auxiliary loss transcribed from transformers' load_balancing_loss_func applied, as
// MixtralForCausalLM does, to the router logits of all layers concatenated along the tokens:
//
//   logits_all [L n, E] = cat over layers of  post_attention_rmsnorm(x_l) Wgate_l^T
//   routing    = softmax(logits_all);  selected = topk(routing, k)
//   expert_mask [L n, k, E] = one_hot(selected)
//   tokens_per_expert [k, E] = mean over the L n rows of expert_mask
//   router_prob_per_expert [E] = mean over the L n rows of routing
//   aux = E * sum(tokens_per_expert * router_prob_per_expert)
//   loss = mean cross-entropy + router_aux_loss_coef * aux
// With n_shared > 0 every layer's block adds the shared experts (block_sparse_moe.shared_experts.*,
// fused [n_shared F, C] / [C, n_shared F]) with weight 1, as moe_reference.h does.
//
// Weights are addressed by the model's names: the stacked block_sparse_moe.experts.w1.weight
// [E, F, C] (w2 [E, C, F], w3) are split here into Hugging Face's per-expert tensors
// experts.{e}.w1.weight, which is what moe_reference.h reads.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "llama_reference.h"
#include "model/moe_model_config.h"
#include "moe_reference.h"

namespace ntp::model::reference {

struct MoeModelOutput {
  double loss = 0.0;  // ce + coef * aux
  double ce = 0.0;
  double aux = 0.0;
  // Smallest gap over all layers and tokens between the k-th and (k+1)-th router logit: weight
  // perturbations that move no logit by this much leave every routing decision unchanged.
  double min_gap = std::numeric_limits<double>::infinity();
  // The busiest expert's routed tokens over the mean (k n / E), the largest over the layers.
  double load_peak = 0.0;
};

inline MoeModelOutput moe_model_forward(const MoeModelConfig& cfg, const Weights& stacked,
                                        const std::vector<int32_t>& tokens,
                                        const std::vector<int32_t>& targets, int64_t bsz,
                                        int64_t t) {
  const LlamaConfig& lc = cfg.llama;
  const int64_t n = bsz * t, c = lc.n_embd, f = lc.ffn(), ne = cfg.n_experts, k = cfg.top_k;
  // Hugging Face's per-expert tensors from the stacked ones.
  Weights wts = stacked;
  for (int64_t l = 0; l < lc.n_layer; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".block_sparse_moe.experts.";
    for (const char* w : {"w1", "w2", "w3"}) {
      const std::vector<double>& all = stacked.at(p + w + ".weight");
      for (int64_t e = 0; e < ne; ++e) {
        wts[p + std::to_string(e) + "." + w + ".weight"] =
            std::vector<double>(all.begin() + e * f * c, all.begin() + (e + 1) * f * c);
      }
    }
  }
  MoeModelOutput out;
  std::vector<double> logits_all;  // [L n, E]
  std::vector<double> x = detail::embed(lc, wts, tokens);
  for (int64_t l = 0; l < lc.n_layer; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    detail::attention_residual(lc, wts, p, x, bsz, t);
    const std::vector<double> h =
        detail::rmsnorm(x, wts.at(p + "post_attention_layernorm.weight"), n, c, lc.rms_norm_eps);
    MoeConfig block = cfg.block();
    block.n_shared = cfg.n_shared;  // moe_reference.h's shared experts: the same fused tensors
    const moe_reference::Output o = moe_reference::moe_forward(block, wts, h, n, p);
    for (size_t i = 0; i < x.size(); ++i) x[i] += o.y[i];
    out.min_gap = std::min(out.min_gap, o.min_gap);
    const std::vector<double> lg =
        detail::linear(h, wts.at(p + "block_sparse_moe.gate.weight"), n, c, ne);
    logits_all.insert(logits_all.end(), lg.begin(), lg.end());
  }
  out.ce = detail::head_loss(lc, wts, x, targets);

  // load_balancing_loss_func(logits_all, E, k), no attention mask.
  const int64_t rows = static_cast<int64_t>(logits_all.size()) / ne;
  std::vector<double> tokens_per_expert(static_cast<size_t>(k * ne), 0.0);
  std::vector<double> router_prob(static_cast<size_t>(ne), 0.0);
  std::vector<int64_t> routed(static_cast<size_t>(lc.n_layer * ne), 0);  // [layer, expert]
  for (int64_t r = 0; r < rows; ++r) {
    const double* lg = logits_all.data() + r * ne;
    const double mx = *std::max_element(lg, lg + ne);
    double z = 0.0;
    for (int64_t e = 0; e < ne; ++e) z += std::exp(lg[e] - mx);
    std::vector<double> prob(static_cast<size_t>(ne));
    for (int64_t e = 0; e < ne; ++e) {
      prob[e] = std::exp(lg[e] - mx) / z;
      router_prob[e] += prob[e] / static_cast<double>(rows);
    }
    std::vector<bool> taken(static_cast<size_t>(ne), false);
    for (int64_t j = 0; j < k; ++j) {  // topk: slot j holds the j-th largest
      int64_t best = -1;
      for (int64_t e = 0; e < ne; ++e) {
        if (!taken[e] && (best < 0 || prob[e] > prob[best])) best = e;
      }
      taken[best] = true;
      tokens_per_expert[j * ne + best] += 1.0 / static_cast<double>(rows);
      ++routed[static_cast<size_t>((r / n) * ne + best)];  // rows are layer-major
    }
  }
  for (int64_t l = 0; l < lc.n_layer; ++l) {
    const auto first = routed.begin() + l * ne;
    out.load_peak =
        std::max(out.load_peak, static_cast<double>(*std::max_element(first, first + ne)) /
                                    (static_cast<double>(k * n) / static_cast<double>(ne)));
  }
  for (int64_t j = 0; j < k; ++j)
    for (int64_t e = 0; e < ne; ++e) out.aux += tokens_per_expert[j * ne + e] * router_prob[e];
  out.aux *= static_cast<double>(ne);
  out.loss = out.ce + cfg.router_aux_loss_coef * out.aux;
  return out;
}

inline double moe_model_loss(const MoeModelConfig& cfg, const Weights& stacked,
                             const std::vector<int32_t>& tokens,
                             const std::vector<int32_t>& targets, int64_t bsz, int64_t t) {
  return moe_model_forward(cfg, stacked, tokens, targets, bsz, t).loss;
}

}  // namespace ntp::model::reference
