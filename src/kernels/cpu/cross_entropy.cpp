#include "kernels/cpu/cross_entropy.h"

#include <cmath>
#include <limits>
#include <vector>

#include "core/check.h"

namespace ntp::kernels::cpu {
namespace {
int64_t column_of(int32_t y, int64_t v, std::span<const int64_t> local_col) {
  if (local_col.empty()) {
    NTP_CHECK_MSG(y >= 0 && y < v, "target id outside the vocabulary");
    return y;
  }
  NTP_CHECK_MSG(y >= 0 && static_cast<size_t>(y) < local_col.size(),
                "target id outside the vocabulary");
  return local_col[static_cast<size_t>(y)];
}
}  // namespace

void row_max(const float* logits, int64_t n, int64_t v, float* max) {
  for (int64_t i = 0; i < n; ++i) {
    float m = -std::numeric_limits<float>::infinity();
    const float* r = logits + i * v;
    for (int64_t j = 0; j < v; ++j) m = r[j] > m ? r[j] : m;
    max[i] = m;
  }
}

void row_sum_exp(const float* logits, int64_t n, int64_t v, const float* max, float* sum) {
  for (int64_t i = 0; i < n; ++i) {
    const float* r = logits + i * v;
    double s = 0.0;
    for (int64_t j = 0; j < v; ++j) s += std::exp(r[j] - max[i]);
    sum[i] = static_cast<float>(s);
  }
}

void target_logits(const float* logits, int64_t n, int64_t v, const int32_t* targets,
                   std::span<const int64_t> local_col, float* out) {
  for (int64_t i = 0; i < n; ++i) {
    const int64_t col = column_of(targets[i], v, local_col);
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
    const float inv = scale / sum[i];
    for (int64_t j = 0; j < v; ++j) d[j] = std::exp(r[j] - max[i]) * inv;
    const int64_t col = column_of(targets[i], v, local_col);
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
