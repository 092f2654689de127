#include "tensor/tensor.h"

#include <gtest/gtest.h>

namespace ntp {
namespace {

TEST(TensorTest, ShapeNumelAndZeroInit) {
  Tensor t({2, 3, 4});
  EXPECT_EQ(t.rank(), 3);
  EXPECT_EQ(t.numel(), 24);
  EXPECT_EQ(t.dim(0), 2);
  EXPECT_EQ(t.dim(-1), 4);
  for (int64_t i = 0; i < t.numel(); ++i) EXPECT_EQ(t[i], 0.0f);
  EXPECT_EQ(shape_string(t.shape()), "[2, 3, 4]");
  EXPECT_EQ(shape_numel({}), 1);
  EXPECT_EQ(shape_numel({5, 0}), 0);
}

TEST(TensorTest, CopiesAreDeepAndFillWorks) {
  Tensor a({3}, {1.0f, 2.0f, 3.0f});
  Tensor b = a;
  b[1] = 7.0f;
  EXPECT_EQ(a[1], 2.0f);
  EXPECT_EQ(b[1], 7.0f);
  a.fill(4.5f);
  for (float v : a.span()) EXPECT_EQ(v, 4.5f);
}

TEST(TensorDeathTest, MismatchedValuesAbort) {
  EXPECT_DEATH(Tensor({2, 2}, {1.0f}), "value count");
}

}  // namespace
}  // namespace ntp
