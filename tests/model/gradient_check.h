// What the whole-model tests against a float64 reference share (llama_model_test.cpp,
// moe_model_test.cpp): the model's logical weights in float64, and the check of every tensor's
// gradient against central finite differences of the reference's loss.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "core/rng.h"
#include "model/param.h"

namespace ntp::model::gradcheck {

using Weights = std::map<std::string, std::vector<double>>;

// Every parameter's logical tensor (scatter_to_logical of its value) in float64, by name.
inline Weights logical_weights(const std::vector<Param>& params) {
  Weights w;
  for (const Param& p : params) {
    std::vector<float> logical(static_cast<size_t>(shape_numel(p.logical_shape)));
    p.scatter_to_logical(p.value.span(), logical);
    w[p.name] = std::vector<double>(logical.begin(), logical.end());
  }
  return w;
}

struct GradientErrors {
  double element = 0.0;      // worst |grad - fd| / (the tensor's largest |grad|)
  double directional = 0.0;  // worst |d/dt loss(w + t g/|g|) - |g|| / |g|
};

// For every parameter (at degree 1: params hold whole tensors), with loss(weights) the reference
// loss: its largest-gradient element and 5 random ones, and the derivative along the tensor's
// whole gradient g / |g|, against central differences with step h around w0. Expects the errors
// below element_limit and directional_limit.
template <typename LossFn>
GradientErrors check_gradients(const std::vector<Param>& params, const Weights& w0, LossFn&& loss,
                               double h, double element_limit, double directional_limit) {
  GradientErrors worst;
  Rng rng(9);
  for (const Param& p : params) {
    std::vector<float> grad(static_cast<size_t>(p.grad.numel()));
    p.scatter_to_logical(p.grad.span(), grad);
    std::vector<size_t> picks = {static_cast<size_t>(
        std::max_element(grad.begin(), grad.end(),
                         [](float a, float b) { return std::abs(a) < std::abs(b); }) -
        grad.begin())};
    for (int i = 0; i < 5; ++i) picks.push_back(rng.below(grad.size()));
    double gmax = 0.0, norm = 0.0;
    for (float g : grad) {
      gmax = std::max(gmax, std::abs(static_cast<double>(g)));
      norm += static_cast<double>(g) * g;
    }
    norm = std::sqrt(norm);
    EXPECT_GT(gmax, 0.0) << p.name;
    if (gmax == 0.0) continue;
    for (size_t e : picks) {
      Weights w = w0;
      w[p.name][e] += h;
      const double fp = loss(w);
      w[p.name][e] -= 2 * h;
      const double fd = (fp - loss(w)) / (2 * h);
      const double err = std::abs(grad[e] - fd) / gmax;
      worst.element = std::max(worst.element, err);
      EXPECT_LT(err, element_limit)
          << p.name << " element " << e << ": " << grad[e] << " vs " << fd;
    }
    Weights wp = w0, wm = w0;
    for (size_t i = 0; i < grad.size(); ++i) {
      wp[p.name][i] += h * grad[i] / norm;
      wm[p.name][i] -= h * grad[i] / norm;
    }
    const double dir = (loss(wp) - loss(wm)) / (2 * h);
    const double err = std::abs(dir - norm) / norm;
    worst.directional = std::max(worst.directional, err);
    EXPECT_LT(err, directional_limit) << p.name << ": directional " << dir << " vs |g| " << norm;
  }
  return worst;
}

}  // namespace ntp::model::gradcheck
