// The kernels split over threads (kernels/cpu/parallel.h) give the same bits at any thread count:
// every such kernel at 3 threads against itself at 1 thread, on shapes whose splits are ragged.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <vector>

#include "kernels/cpu/adamw.h"
#include "kernels/cpu/attention.h"
#include "kernels/cpu/clip.h"
#include "kernels/cpu/gelu.h"
#include "kernels/cpu/gemm.h"
#include "kernels/cpu/layernorm.h"
#include "kernels/cpu/linear.h"
#include "kernels/cpu/parallel.h"
#include "reference.h"

namespace ntp::kernels {
namespace {

std::vector<float> random_floats(int64_t n, uint64_t seed, double scale = 1.0) {
  Rng rng(seed);
  return reference::to_float(reference::random_vec(rng, n, scale));
}

// Runs op() at 1 and at 3 threads and expects identical outputs, bit for bit.
template <class Op>
void expect_same_bits_at_any_thread_count(Op op) {
  const int saved = cpu::blas_threads();
  cpu::set_blas_threads(1);
  const std::vector<std::vector<float>> one = op();
  cpu::set_blas_threads(3);
  ASSERT_EQ(cpu::kernel_threads(), 3);
  const std::vector<std::vector<float>> three = op();
  cpu::set_blas_threads(saved);
  ASSERT_EQ(one.size(), three.size());
  for (size_t a = 0; a < one.size(); ++a) {
    ASSERT_EQ(one[a].size(), three[a].size());
    ASSERT_EQ(std::memcmp(one[a].data(), three[a].data(), one[a].size() * sizeof(float)), 0)
        << "output " << a;
  }
}

TEST(ParallelTest, RangesCoverEachIndexOnce) {
  const int saved = cpu::blas_threads();
  for (int threads : {1, 2, 3}) {
    cpu::set_blas_threads(threads);
    for (int64_t n : {int64_t{1}, int64_t{2}, int64_t{7}, int64_t{1000}}) {
      for (int64_t grain : {int64_t{1}, int64_t{3}, int64_t{5000}}) {
        std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
        cpu::parallel_for(n, grain, [&](int64_t b, int64_t e) {
          EXPECT_LT(b, e);
          for (int64_t i = b; i < e; ++i) hits[static_cast<size_t>(i)]++;
          // Nested calls run inline.
          cpu::parallel_for(2, 1, [](int64_t, int64_t) {});
        });
        for (int64_t i = 0; i < n; ++i) ASSERT_EQ(hits[static_cast<size_t>(i)], 1) << n << " " << i;
      }
    }
  }
  cpu::set_blas_threads(saved);
}

// Kernels that call single-threaded sgemm from every range (attention, split products) lower
// OpenBLAS to one thread first; the split must still use all of ntp's threads.
TEST(ParallelTest, SplitsOverAllThreadsInsideSingleThreadedBlas) {
  const int saved = cpu::blas_threads();
  cpu::set_blas_threads(3);
  {
    const cpu::SingleThreadedBlas single;
    EXPECT_EQ(cpu::blas_threads(), 1);
    EXPECT_EQ(cpu::kernel_threads(), 3);
    std::atomic<int> ranges{0};
    cpu::parallel_for(30, 1, [&](int64_t, int64_t) { ++ranges; });
    EXPECT_EQ(ranges, 3);
  }
  EXPECT_EQ(cpu::blas_threads(), 3);
  cpu::set_blas_threads(saved);
}

TEST(ParallelTest, AForkedChildStartsItsOwnWorkers) {
  const int saved = cpu::blas_threads();
  cpu::set_blas_threads(2);
  std::atomic<int> sum{0};
  cpu::parallel_for(100, 1, [&](int64_t b, int64_t e) { sum += static_cast<int>(e - b); });
  ASSERT_EQ(sum, 100);
  const pid_t pid = fork();
  if (pid == 0) {
    std::atomic<int> child_sum{0};
    cpu::parallel_for(100, 1, [&](int64_t b, int64_t e) { child_sum += static_cast<int>(e - b); });
    _exit(child_sum == 100 ? 0 : 1);
  }
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  cpu::set_blas_threads(saved);
}

TEST(ParallelTest, ElementwiseKernelsAreSplitIndependent) {
  const int64_t rows = 37, cols = 3001;  // ragged splits of rows, columns and elements
  const int64_t n = rows * cols;
  const std::vector<float> x = random_floats(n, 1, 2.0), dy = random_floats(n, 2),
                           b = random_floats(cols, 3), g = random_floats(cols, 4);
  expect_same_bits_at_any_thread_count([&] {
    std::vector<float> y(n), dx(n), dx2(n), db(cols, 0.5f), z(n), ln(n), mean(rows), rstd(rows);
    cpu::gelu_forward(x.data(), n, y.data());
    cpu::gelu_backward(x.data(), dy.data(), n, dx.data());
    cpu::gelu_backward_column_sums(x.data(), dy.data(), rows, cols, dx2.data(), db.data());
    cpu::add_bias_residual(x.data(), dy.data(), b.data(), rows, cols, z.data());
    std::vector<float> res(n);
    cpu::linear_forward_residual(x.data(), g.data(), b.data(), dy.data(), rows, 1, cols,
                                 res.data());
    std::vector<float> db2(cols, 0.25f);
    cpu::add_column_sums(dy.data(), rows, cols, db2.data());
    cpu::layernorm_forward(x.data(), g.data(), b.data(), rows, cols, ln.data(), mean.data(),
                           rstd.data());
    std::vector<float> lndx(n, 0.5f), dg(cols, 0.0f), dbeta(cols, 0.0f);
    cpu::layernorm_backward(x.data(), g.data(), mean.data(), rstd.data(), dy.data(), rows, cols,
                            lndx.data(), dg.data(), dbeta.data(), /*accumulate_dx=*/true);
    const double sq = cpu::sum_of_squares(x.data(), n);
    std::vector<float> sq_bits(2);  // the double's bits
    std::memcpy(sq_bits.data(), &sq, sizeof(sq));
    return std::vector<std::vector<float>>{y,    dx,   dx2,  db, z,     db2,    ln,
                                           mean, rstd, lndx, dg, dbeta, sq_bits};
  });
}

TEST(ParallelTest, AdamWIsSplitIndependent) {
  const int64_t n = 200003;
  const std::vector<float> p0 = random_floats(n, 5), grad = random_floats(n, 6);
  expect_same_bits_at_any_thread_count([&] {
    std::vector<float> p = p0, m(n, 0.0f), v(n, 0.0f);
    for (int64_t step = 1; step <= 2; ++step) {
      cpu::adamw_step(p.data(), grad.data(), m.data(), v.data(), n, step,
                      {.lr = 1e-3f, .weight_decay = 0.1f}, 0.7f);
    }
    return std::vector<std::vector<float>>{p, m, v};
  });
}

// Products large enough to be split by rows of C (tall, wide and square C), every transpose,
// beta 0 and 1, leading dimensions wider than the matrices, ragged parts: the same bits as one
// single-threaded OpenBLAS call.
TEST(ParallelTest, SplitProductsAreSplitIndependent) {
  struct Shape {
    int64_t m, n, k;
  };
  for (const Shape s : {Shape{1031, 517, 263}, Shape{129, 1553, 211}, Shape{4099, 65, 70}}) {
    for (const bool ta : {false, true}) {
      for (const bool tb : {false, true}) {
        const int64_t lda = (ta ? s.m : s.k) + 3, ldb = (tb ? s.k : s.n) + 5, ldc = s.n + 7;
        const std::vector<float> a = random_floats((ta ? s.k : s.m) * lda, 11),
                                 b = random_floats((tb ? s.n : s.k) * ldb, 12),
                                 c0 = random_floats(s.m * ldc, 13);
        SCOPED_TRACE(::testing::Message()
                     << s.m << "x" << s.n << "x" << s.k << " ta " << ta << " tb " << tb);
        ASSERT_GE(s.m * s.n * s.k, int64_t{1} << 22);  // large enough to be split
        expect_same_bits_at_any_thread_count([&] {
          std::vector<float> c_beta0 = c0, c_beta1 = c0;
          cpu::gemm(ta, tb, s.m, s.n, s.k, 0.75f, a.data(), lda, b.data(), ldb, 0.0f,
                    c_beta0.data(), ldc);
          cpu::gemm(ta, tb, s.m, s.n, s.k, 1.0f, a.data(), lda, b.data(), ldb, 1.0f, c_beta1.data(),
                    ldc);
          return std::vector<std::vector<float>>{c_beta0, c_beta1};
        });
      }
    }
  }
}

// Large products issued from inside parallel_for ranges (one per range, on several threads at
// once) run as one single-threaded OpenBLAS call each, with the same bits as at one thread.
TEST(ParallelTest, LargeProductsInsideRangesAreSplitIndependent) {
  const int64_t m = 300, n = 257, k = 129, parts = 5;  // 9.9 M multiply-adds per product
  const std::vector<float> a = random_floats(parts * m * k, 14), b = random_floats(k * n, 15);
  expect_same_bits_at_any_thread_count([&] {
    std::vector<float> c(static_cast<size_t>(parts * m * n));
    const cpu::SingleThreadedBlas single;
    cpu::parallel_for(parts, 1, [&](int64_t p0, int64_t p1) {
      for (int64_t p = p0; p < p1; ++p) {
        cpu::gemm(false, false, m, n, k, 1.0f, a.data() + p * m * k, k, b.data(), n, 0.0f,
                  c.data() + p * m * n, n);
      }
    });
    return std::vector<std::vector<float>>{c};
  });
}

TEST(ParallelTest, AttentionIsSplitIndependent) {
  const int64_t b = 2, t = 131, h = 5, d = 8;  // 10 (batch, head) pairs over 3 threads
  const std::vector<float> qkv = random_floats(b * t * 3 * h * d, 7),
                           dout = random_floats(b * t * h * d, 8);
  expect_same_bits_at_any_thread_count([&] {
    std::vector<float> out(b * t * h * d), lse(b * h * t), dqkv(qkv.size());
    cpu::attention_forward(qkv.data(), b, t, h, d, out.data(), lse.data());
    cpu::attention_backward(qkv.data(), lse.data(), dout.data(), b, t, h, d, dqkv.data());
    return std::vector<std::vector<float>>{out, lse, dqkv};
  });
}

}  // namespace
}  // namespace ntp::kernels
