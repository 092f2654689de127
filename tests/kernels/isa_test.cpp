// The trainer's numerical contract for element-wise kernels: an element's result depends only on
// its own inputs, not on its position or alignment in the array (vector body vs scalar tail) nor
// on the ISA variant the host runs (baseline, AVX2, AVX-512), so replicas of different layouts,
// on different hosts, stay bit-identical.
#include <gtest/gtest.h>

#include <cstring>
#include <functional>

#include "isa_variants.h"
#include "kernels/cpu/adamw.h"
#include "kernels/cpu/clip.h"
#include "kernels/cpu/gelu.h"
#include "kernels/cpu/isa.h"
#include "kernels/cpu/linear.h"
#include "reference.h"

namespace ntp::kernels {
namespace {

constexpr int64_t kN = 301;  // several 16-wide vectors and a ragged tail

// Runs `op` over [offset, offset + len) of a copy of the inputs, for every variant and many
// offsets/lengths, and checks each element's output bits equal those of the baseline variant
// over the whole array.
using Op = std::function<void(std::vector<std::vector<float>>& arrays, int64_t begin, int64_t n)>;

std::vector<std::vector<float>> random_arrays(int count, uint64_t seed) {
  Rng rng(seed);
  std::vector<std::vector<float>> out;
  for (int i = 0; i < count; ++i) {
    out.push_back(reference::to_float(reference::random_vec(rng, kN, 2.0)));
  }
  for (float& x : out.back()) x = std::abs(x);  // AdamW's v must be >= 0; harmless elsewhere
  return out;
}

void expect_position_and_isa_independent(int arrays, const Op& op) {
  const std::vector<std::vector<float>> input = random_arrays(arrays, 21);
  std::vector<std::vector<float>> want = input;
  const cpu::Isa saved = cpu::set_active_isa(cpu::Isa::kBaseline);
  op(want, 0, kN);
  for_each_isa([&](cpu::Isa) {
    for (int64_t begin : {int64_t{0}, int64_t{1}, int64_t{3}, int64_t{7}, int64_t{17}}) {
      for (int64_t len : {kN - begin, int64_t{5}, int64_t{33}, int64_t{100}}) {
        std::vector<std::vector<float>> got = input;
        op(got, begin, len);
        for (size_t a = 0; a < got.size(); ++a) {
          for (int64_t i = begin; i < begin + len; ++i) {
            ASSERT_EQ(std::memcmp(&got[a][i], &want[a][i], sizeof(float)), 0)
                << "array " << a << " element " << i << " computed from offset " << begin
                << " length " << len << ": " << got[a][i] << " vs " << want[a][i];
          }
        }
      }
    }
  });
  cpu::set_active_isa(saved);
}

TEST(IsaTest, AdamWIsBitIdenticalAcrossPositionsAndVariants) {
  const cpu::AdamWHyper hyper{.lr = 1e-3f, .weight_decay = 0.1f};
  // arrays: param, grad, m, v
  expect_position_and_isa_independent(4, [&](auto& x, int64_t begin, int64_t n) {
    for (int64_t step = 1; step <= 3; ++step) {
      cpu::adamw_step(x[0].data() + begin, x[1].data() + begin, x[2].data() + begin,
                      x[3].data() + begin, n, step, hyper);
    }
  });
}

TEST(IsaTest, GeluIsBitIdenticalAcrossPositionsAndVariants) {
  // arrays: x, dy, y, dx
  expect_position_and_isa_independent(4, [](auto& x, int64_t begin, int64_t n) {
    cpu::gelu_forward(x[0].data() + begin, n, x[2].data() + begin);
    cpu::gelu_backward(x[0].data() + begin, x[1].data() + begin, n, x[3].data() + begin);
  });
}

TEST(IsaTest, AdamWWithGradScaleEqualsScalingFirstBitForBit) {
  const cpu::AdamWHyper hyper{.lr = 1e-3f, .weight_decay = 0.1f};
  const float scale = 0.377f;
  for_each_isa([&](cpu::Isa) {
    // arrays: param, grad, m, v
    std::vector<std::vector<float>> fused = random_arrays(4, 23), separate = fused;
    const std::vector<float> grad = fused[1];
    for (int64_t step = 1; step <= 3; ++step) {
      cpu::adamw_step(fused[0].data(), fused[1].data(), fused[2].data(), fused[3].data(), kN, step,
                      hyper, scale);
      separate[1] = grad;
      cpu::scale_in_place(separate[1].data(), kN, scale);
      cpu::adamw_step(separate[0].data(), separate[1].data(), separate[2].data(),
                      separate[3].data(), kN, step, hyper);
    }
    EXPECT_EQ(fused[1], grad);  // the gradient is left as it was
    for (int a : {0, 2, 3}) {
      ASSERT_EQ(std::memcmp(fused[a].data(), separate[a].data(), kN * sizeof(float)), 0) << a;
    }
  });
}

TEST(IsaTest, GeluBackwardWithColumnSumsEqualsTheTwoPassesBitForBit) {
  const int64_t rows = 7, cols = 43;  // vector bodies of every width plus a tail
  Rng rng(24);
  const std::vector<float> x = reference::to_float(reference::random_vec(rng, rows * cols, 2.0));
  const std::vector<float> dy = reference::to_float(reference::random_vec(rng, rows * cols));
  const std::vector<float> db0 = reference::to_float(reference::random_vec(rng, cols));
  for_each_isa([&](cpu::Isa) {
    std::vector<float> dx(rows * cols), want_dx(rows * cols), db = db0, want_db = db0;
    cpu::gelu_backward_column_sums(x.data(), dy.data(), rows, cols, dx.data(), db.data());
    cpu::gelu_backward(x.data(), dy.data(), rows * cols, want_dx.data());
    cpu::add_column_sums(want_dx.data(), rows, cols, want_db.data());
    ASSERT_EQ(std::memcmp(dx.data(), want_dx.data(), dx.size() * sizeof(float)), 0);
    ASSERT_EQ(std::memcmp(db.data(), want_db.data(), db.size() * sizeof(float)), 0);
  });
}

TEST(IsaTest, BiasResidualEqualsAddBiasThenAddBitForBit) {
  const int64_t rows = 5, cols = 37;
  Rng rng(25);
  const std::vector<float> x = reference::to_float(reference::random_vec(rng, rows * cols));
  const std::vector<float> y = reference::to_float(reference::random_vec(rng, rows * cols));
  const std::vector<float> b = reference::to_float(reference::random_vec(rng, cols));
  for_each_isa([&](cpu::Isa) {
    std::vector<float> z(rows * cols), want = x, yb = y;
    cpu::add_bias_residual(x.data(), y.data(), b.data(), rows, cols, z.data());
    cpu::add_bias(b.data(), rows, cols, yb.data());
    for (size_t i = 0; i < want.size(); ++i) want[i] += yb[i];
    ASSERT_EQ(std::memcmp(z.data(), want.data(), z.size() * sizeof(float)), 0);
    std::vector<float> in_place = x;  // z may alias x
    cpu::add_bias_residual(in_place.data(), y.data(), b.data(), rows, cols, in_place.data());
    ASSERT_EQ(std::memcmp(in_place.data(), want.data(), z.size() * sizeof(float)), 0);
  });
}

TEST(IsaTest, ScalingIsBitIdenticalAcrossPositionsAndVariants) {
  expect_position_and_isa_independent(1, [](auto& x, int64_t begin, int64_t n) {
    cpu::scale_in_place(x[0].data() + begin, n, 0.377f);
  });
}

TEST(IsaTest, SumOfSquaresIsTheSameInEveryVariant) {
  const std::vector<float> x = random_arrays(1, 5).front();
  double want = 0.0;
  for (float v : x) want += static_cast<double>(v) * v;
  const cpu::Isa saved = cpu::set_active_isa(cpu::Isa::kBaseline);
  const double baseline = cpu::sum_of_squares(x.data(), kN);
  EXPECT_NEAR(baseline, want, 1e-12 * want);
  for_each_isa([&](cpu::Isa) {
    const double got = cpu::sum_of_squares(x.data(), kN);
    EXPECT_EQ(std::memcmp(&got, &baseline, sizeof(double)), 0) << got << " vs " << baseline;
  });
  cpu::set_active_isa(saved);
}

TEST(IsaTest, VariantsFollowTheFeatureFlags) {
  const cpu::CpuFeatures& f = cpu::host_cpu_features();
  const cpu::Isa host = cpu::host_isa();
  const bool avx512 = f.avx512f && f.avx512bw && f.avx512vl && f.avx512dq && f.avx2 && f.fma;
  EXPECT_EQ(host == cpu::Isa::kAvx512, avx512);
  EXPECT_EQ(host == cpu::Isa::kAvx2, !avx512 && f.avx2 && f.fma);
  EXPECT_EQ(cpu::supported_isas().front(), cpu::Isa::kBaseline);
  EXPECT_EQ(cpu::supported_isas().back(), host);
  // Asking for more than the host has gives the host's best.
  const cpu::Isa saved = cpu::set_active_isa(cpu::Isa::kAvx512);
  EXPECT_EQ(cpu::active_isa(), host);
  cpu::set_active_isa(saved);
}

}  // namespace
}  // namespace ntp::kernels
