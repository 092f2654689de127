#include "kernels/cpu/adamw.h"

#include <cmath>

#include "core/check.h"
#include "kernels/cpu/isa_dispatch.h"
#include "kernels/cpu/parallel.h"

namespace ntp::kernels::cpu {
namespace {

// Bias corrections c1 = 1 / (1 - beta1^step), c2 = 1 / (1 - beta2^step) precomputed.
struct AdamWCoefficients {
  float b1, b2, c1, c2, lr, eps, weight_decay, grad_scale;
};

// Element-wise: the same IEEE operations for every element in every ISA variant (no FMA
// contraction, see isa.h), so an element's update does not depend on where it sits in the array.
NTP_ISA_INLINE void adamw_body(float* param, const float* grad, float* m, float* v, int64_t n,
                               const AdamWCoefficients* k) {
  const float b1 = k->b1, b2 = k->b2, c1 = k->c1, c2 = k->c2, lr = k->lr, eps = k->eps,
              wd = k->weight_decay, gs = k->grad_scale;
  for (int64_t i = 0; i < n; ++i) {
    const float g = grad[i] * gs;  // x * 1.0f == x: unscaled updates are unchanged
    const float mi = b1 * m[i] + (1.0f - b1) * g;
    const float vi = b2 * v[i] + (1.0f - b2) * g * g;
    m[i] = mi;
    v[i] = vi;
    const float mhat = mi * c1;
    const float vhat = vi * c2;
    param[i] -= lr * (mhat / (std::sqrt(vhat) + eps) + wd * param[i]);
  }
}
NTP_ISA_VARIANTS(adamw_isa, adamw_body)

}  // namespace

void adamw_step(float* param, const float* grad, float* m, float* v, int64_t n, int64_t step,
                const AdamWHyper& hyper, float grad_scale) {
  NTP_CHECK(step >= 1);
  const double s = static_cast<double>(step);
  const AdamWCoefficients k{
      hyper.beta1,
      hyper.beta2,
      static_cast<float>(1.0 / (1.0 - std::pow(static_cast<double>(hyper.beta1), s))),
      static_cast<float>(1.0 / (1.0 - std::pow(static_cast<double>(hyper.beta2), s))),
      hyper.lr,
      hyper.eps,
      hyper.weight_decay,
      grad_scale};
  // Element-wise, hence split-independent (IsaTest): ranges of 64 Ki elements over the threads.
  parallel_for(n, int64_t{1} << 16, [&](int64_t i0, int64_t i1) {
    adamw_isa(param + i0, grad + i0, m + i0, v + i0, i1 - i0, &k);
  });
}

}  // namespace ntp::kernels::cpu
