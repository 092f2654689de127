// AdamW (Loshchilov & Hutter): Adam with decoupled weight decay and bias correction, elementwise
// over n parameters. `step` is the 1-based index of this update; g = grad_scale * grad (the
// global-norm clip coefficient, kernels/cpu/clip.h, applied in the same pass: bit-identical to
// scaling the gradient first, one pass over the gradients fewer; grad is left as it was).
//   m = b1 m + (1 - b1) g;  v = b2 v + (1 - b2) g^2
//   mhat = m / (1 - b1^step);  vhat = v / (1 - b2^step)
//   p = p - lr * (mhat / (sqrt(vhat) + eps) + weight_decay * p)
// This equals PyTorch's torch.optim.AdamW (decay applied to the pre-update p).
#pragma once

#include <cstdint>

namespace ntp::kernels::cpu {

struct AdamWHyper {
  float lr = 3e-4f;
  float beta1 = 0.9f;
  float beta2 = 0.95f;
  float eps = 1e-8f;
  float weight_decay = 0.0f;
};

void adamw_step(float* param, const float* grad, float* m, float* v, int64_t n, int64_t step,
                const AdamWHyper& hyper, float grad_scale = 1.0f);

}  // namespace ntp::kernels::cpu
