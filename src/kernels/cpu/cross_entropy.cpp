#include "kernels/cpu/cross_entropy.h"

#include <cmath>
#include <limits>
#include <vector>

#include "core/check.h"
#include "kernels/cpu/embedding.h"
#include "kernels/cpu/fast_exp.h"
#include "kernels/cpu/isa_dispatch.h"

namespace ntp::kernels::cpu {
namespace {
NTP_ISA_INLINE void row_max_body(const float* logits, int64_t n, int64_t v, float* max) {
  for (int64_t i = 0; i < n; ++i) {
    float m = -std::numeric_limits<float>::infinity();
    const float* r = logits + i * v;
    for (int64_t j = 0; j < v; ++j) m = r[j] > m ? r[j] : m;
    max[i] = m;
  }
}
NTP_ISA_VARIANTS(row_max_isa, row_max_body)

// e[j] = exp(r[j] - mx) * scale over v values (fast_exp: relative error < 3e-7, vectorized).
NTP_ISA_INLINE void scaled_exp_body(const float* r, int64_t v, float mx, float scale, float* e) {
  for (int64_t j = 0; j < v; ++j) e[j] = fast_exp(r[j] - mx) * scale;
}
NTP_ISA_VARIANTS(scaled_exp, scaled_exp_body)

}  // namespace

void row_max(const float* logits, int64_t n, int64_t v, float* max) {
  row_max_isa(logits, n, v, max);
}

void row_sum_exp(const float* logits, int64_t n, int64_t v, const float* max, float* sum) {
  thread_local std::vector<float> e;
  if (static_cast<int64_t>(e.size()) < v) e.resize(static_cast<size_t>(v));
  for (int64_t i = 0; i < n; ++i) {
    scaled_exp(logits + i * v, v, max[i], 1.0f, e.data());
    double s = 0.0;
    for (int64_t j = 0; j < v; ++j) s += e[j];
    sum[i] = static_cast<float>(s);
  }
}

void target_logits(const float* logits, int64_t n, int64_t v, const int32_t* targets,
                   std::span<const int64_t> local_col, float* out) {
  for (int64_t i = 0; i < n; ++i) {
    const int64_t col = local_vocab_index(targets[i], v, local_col);
    out[i] = col < 0 ? 0.0f : logits[i * v + col];
  }
}

double cross_entropy_loss_sum(int64_t n, const float* max, const float* sum, const float* target) {
  double total = 0.0;
  for (int64_t i = 0; i < n; ++i) {
    total += std::log(static_cast<double>(sum[i])) + max[i] - target[i];
  }
  return total;
}

void cross_entropy_backward(const float* logits, int64_t n, int64_t v, const int32_t* targets,
                            std::span<const int64_t> local_col, const float* max, const float* sum,
                            float scale, float* dlogits) {
  for (int64_t i = 0; i < n; ++i) {
    const float* r = logits + i * v;
    float* d = dlogits + i * v;
    scaled_exp(r, v, max[i], scale / sum[i], d);
    const int64_t col = local_vocab_index(targets[i], v, local_col);
    if (col >= 0) d[col] -= scale;
  }
}

double cross_entropy_forward_backward(const float* logits, int64_t n, int64_t v,
                                      const int32_t* targets, float scale, float* dlogits) {
  std::vector<float> max(static_cast<size_t>(n)), sum(static_cast<size_t>(n)),
      target(static_cast<size_t>(n));
  row_max(logits, n, v, max.data());
  row_sum_exp(logits, n, v, max.data(), sum.data());
  target_logits(logits, n, v, targets, {}, target.data());
  cross_entropy_backward(logits, n, v, targets, {}, max.data(), sum.data(), scale, dlogits);
  return cross_entropy_loss_sum(n, max.data(), sum.data(), target.data());
}

}  // namespace ntp::kernels::cpu
