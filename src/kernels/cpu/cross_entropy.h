// Fused softmax cross-entropy over the vocabulary, split into stages so that a vocabulary-parallel
// LM head can all-reduce the per-row statistics between them (Megatron's parallel cross-entropy).
//
// logits[N, V] hold the columns a rank owns; column j is logical vocabulary id ids[j], and
// `local_col` maps a logical id to its column or -1 (empty = whole vocabulary, column = id).
// With the global row max M, global S = sum_j exp(l_j - M) and target logit l_y (each the TP sum or
// max of the local values):
//   loss_n = log(S_n) + M_n - l_y(n)
//   dlogits[n, j] = scale * (exp(l_j - M_n) / S_n - [ids[j] == y(n)])     (overwritten)
// `scale` is the gradient of the total loss w.r.t. each row's loss (1/N for a mean).
#pragma once

#include <cstdint>
#include <span>

namespace ntp::kernels::cpu {

void row_max(const float* logits, int64_t n, int64_t v, float* max);
// sum[n] = sum_j exp(logits[n, j] - max[n]) over local columns.
void row_sum_exp(const float* logits, int64_t n, int64_t v, const float* max, float* sum);
// out[n] = logits[n, local_col[y]] if y is local, else 0.
void target_logits(const float* logits, int64_t n, int64_t v, const int32_t* targets,
                   std::span<const int64_t> local_col, float* out);
// Sum over rows of loss_n, accumulated in double.
double cross_entropy_loss_sum(int64_t n, const float* max, const float* sum, const float* target);
void cross_entropy_backward(const float* logits, int64_t n, int64_t v, const int32_t* targets,
                            std::span<const int64_t> local_col, const float* max, const float* sum,
                            float scale, float* dlogits);

// Whole-vocabulary convenience: returns the summed loss and writes dlogits with `scale`.
double cross_entropy_forward_backward(const float* logits, int64_t n, int64_t v,
                                      const int32_t* targets, float scale, float* dlogits);

}  // namespace ntp::kernels::cpu
