#include <gtest/gtest.h>

#include "train/adamw_optimizer.h"

namespace ntp::train {
namespace {

model::Param make_param(std::vector<int64_t> shape, float value, float grad) {
  model::Param p;
  p.name = "p";
  p.logical_shape = shape;
  p.value = Tensor(shape);
  p.value.fill(value);
  p.grad = Tensor(shape);
  p.grad.fill(grad);
  return p;
}

TEST(AdamWOptimizerTest, DecaysMatricesOnlyAndAppliesGradScale) {
  std::vector<model::Param> params;
  params.push_back(make_param({2, 2}, 1.0f, 0.0f));  // matrix: decayed
  params.push_back(make_param({3}, 1.0f, 0.0f));     // bias: not decayed
  params.push_back(make_param({2}, 0.0f, 4.0f));     // gradient scaled by 0.5 -> 2 in the update
  AdamWOptimizer opt(
      params, {.lr = 0.0f, .beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f, .weight_decay = 0.5f});
  opt.step(params, 0.1f, 0.5f);
  EXPECT_EQ(opt.steps_taken(), 1);
  for (float v : params[0].value.span()) EXPECT_FLOAT_EQ(v, 1.0f - 0.1f * 0.5f);
  for (float v : params[1].value.span()) EXPECT_FLOAT_EQ(v, 1.0f);
  for (float g : params[2].grad.span()) EXPECT_FLOAT_EQ(g, 4.0f);  // scaled inside the update
  // First Adam step moves by lr * sign(g) (bias-corrected m / sqrt(v) = g / |g|).
  for (float v : params[2].value.span()) EXPECT_NEAR(v, -0.1f, 1e-6);
}

TEST(LearningRateTest, WarmupThenCosineToMinimum) {
  EXPECT_FLOAT_EQ(warmup_cosine_lr(0, 10, 110, 1.0f, 0.1f), 0.1f);
  EXPECT_FLOAT_EQ(warmup_cosine_lr(9, 10, 110, 1.0f, 0.1f), 1.0f);
  EXPECT_FLOAT_EQ(warmup_cosine_lr(10, 10, 110, 1.0f, 0.1f), 1.0f);
  EXPECT_NEAR(warmup_cosine_lr(60, 10, 110, 1.0f, 0.1f), 0.55f, 1e-6);  // halfway: mean
  EXPECT_FLOAT_EQ(warmup_cosine_lr(500, 10, 110, 1.0f, 0.1f), 0.1f);
  float prev = 2.0f;
  for (int64_t s = 10; s <= 110; ++s) {
    const float lr = warmup_cosine_lr(s, 10, 110, 1.0f, 0.1f);
    EXPECT_LE(lr, prev);
    prev = lr;
  }
}

}  // namespace
}  // namespace ntp::train
