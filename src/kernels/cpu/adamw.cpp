#include "kernels/cpu/adamw.h"

#include <cmath>

#include "core/check.h"

namespace ntp::kernels::cpu {

void adamw_step(float* param, const float* grad, float* m, float* v, int64_t n, int64_t step,
                const AdamWHyper& hyper) {
  NTP_CHECK(step >= 1);
  const double s = static_cast<double>(step);
  const float c1 = static_cast<float>(1.0 / (1.0 - std::pow(static_cast<double>(hyper.beta1), s)));
  const float c2 = static_cast<float>(1.0 / (1.0 - std::pow(static_cast<double>(hyper.beta2), s)));
  const float b1 = hyper.beta1;
  const float b2 = hyper.beta2;
  for (int64_t i = 0; i < n; ++i) {
    const float g = grad[i];
    m[i] = b1 * m[i] + (1.0f - b1) * g;
    v[i] = b2 * v[i] + (1.0f - b2) * g * g;
    const float mhat = m[i] * c1;
    const float vhat = v[i] * c2;
    param[i] -= hyper.lr * (mhat / (std::sqrt(vhat) + hyper.eps) + hyper.weight_decay * param[i]);
  }
}

}  // namespace ntp::kernels::cpu
