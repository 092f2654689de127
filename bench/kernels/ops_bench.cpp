// Where the time of a GPT-2 block goes on CPU: each kernel's forward + backward time at the
// shapes of a width-512, context-256, 8-head model with batch 4, side by side in one run, as a
// share of their sum, and for the matrix products their GFLOP/s next to a plain 1024^3 sgemm.
// Llama's own kernels (SwiGLU, RMSNorm, RoPE) at the same shapes follow GPT-2's.
//
//   build/bench/kernels/kernels_ops_bench [--threads N] [--reps R]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

#include "core/rng.h"
#include "kernels/cpu/adamw.h"
#include "kernels/cpu/attention.h"
#include "kernels/cpu/blas_select.h"
#include "kernels/cpu/clip.h"
#include "kernels/cpu/cross_entropy.h"
#include "kernels/cpu/gelu.h"
#include "kernels/cpu/gemm.h"
#include "kernels/cpu/layernorm.h"
#include "kernels/cpu/linear.h"
#include "kernels/cpu/rmsnorm.h"
#include "kernels/cpu/rope.h"
#include "kernels/cpu/swiglu.h"

namespace {

namespace k = ntp::kernels::cpu;

// Values ~ N(0, stddev^2). Realistic scales matter: libm's expf takes a slow path for the huge
// arguments that unit-variance weights would produce in GELU.
std::vector<float> random(int64_t n, uint64_t seed, double stddev) {
  ntp::Rng rng(seed);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = static_cast<float>(rng.normal() * stddev);
  return v;
}

volatile double benchmark_sink = 0.0;  // keeps results the compiler could otherwise drop

// Best time in seconds of `reps` calls.
double best_of(int reps, const std::function<void()>& f) {
  f();
  double best = 1e30;
  for (int r = 0; r < reps; ++r) {
    const auto t = std::chrono::steady_clock::now();
    f();
    best =
        std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count());
  }
  return best;
}

}  // namespace

int main(int argc, char** argv) {
  int threads = 1, reps = 5;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    const int value = std::atoi(argv[i + 1]);
    if (value <= 0 || (flag != "--threads" && flag != "--reps")) {
      std::fprintf(stderr, "error: bad option %s %s (use --threads N, --reps R, N and R >= 1)\n",
                   argv[i], argv[i + 1]);
      return 2;
    }
    (flag == "--threads" ? threads : reps) = value;
  }
  k::set_blas_threads(threads);
  const int64_t b = 4, t = 256, c = 512, h = 8, d = c / h, f = 4 * c, v = 256, n = b * t;

  // Post-LayerNorm activations ~ N(0, 1), GPT-2 initial weights ~ N(0, 0.02^2).
  std::vector<float> x = random(n * c, 1, 1.0), w_qkv = random(c * 3 * c, 2, 0.02),
                     b_qkv = random(3 * c, 3, 0.02), w_fc = random(c * f, 4, 0.02),
                     b_fc = random(f, 5, 0.02), gamma = random(c, 6, 1.0), beta = random(c, 7, 1.0),
                     wte = random(v * c, 8, 0.02);
  std::vector<float> qkv(static_cast<size_t>(n * 3 * c)), dqkv(qkv.size()), att(n * c), datt(n * c),
      lse(static_cast<size_t>(b * h * t)), y(n * c), dx(n * c), mean(static_cast<size_t>(n)),
      rstd(static_cast<size_t>(n)), fc(static_cast<size_t>(n * f)), g(fc.size()), dg(fc.size()),
      logits(static_cast<size_t>(n * v)), dlogits(logits.size()), dw_qkv(w_qkv.size()),
      db_qkv(b_qkv.size()), dw_fc(w_fc.size()), db_fc(b_fc.size()), dgamma(gamma.size()),
      dbeta(beta.size()), m(w_fc.size()), vv(w_fc.size());
  std::vector<int32_t> targets(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) targets[static_cast<size_t>(i)] = static_cast<int32_t>(i % v);
  k::linear_forward(x.data(), w_qkv.data(), b_qkv.data(), n, c, 3 * c, qkv.data());

  struct Row {
    std::string name;
    double seconds;
    double flops;  // 0 when not a matrix product
    std::function<void()> run;
  };
  std::vector<Row> rows;
  auto add = [&](std::string name, double flops, std::function<void()> run) {
    rows.push_back({std::move(name), best_of(reps, run), flops, run});
  };
  add("c_fc linear fwd+bwd [1024x512]x[512x2048]", 6.0 * static_cast<double>(n * c * f), [&] {
    k::linear_forward(x.data(), w_fc.data(), b_fc.data(), n, c, f, fc.data());
    k::linear_backward(x.data(), w_fc.data(), fc.data(), n, c, f, dx.data(), dw_fc.data(),
                       db_fc.data());
  });
  // Useful (causal) FLOPs: 6 products of T x T x D, half of each square.
  add("causal attention fwd+bwd (8 heads of 64)",
      0.5 * 6.0 * 2.0 * static_cast<double>(b * h * t * t * d), [&] {
        k::attention_forward(qkv.data(), b, t, h, d, att.data(), lse.data());
        k::attention_backward(qkv.data(), lse.data(), att.data(), b, t, h, d, dqkv.data());
      });
  add("GELU fwd+bwd [1024x2048]", 0.0, [&] {
    k::gelu_forward(fc.data(), n * f, g.data());
    k::gelu_backward(fc.data(), g.data(), n * f, dg.data());
  });
  add("LayerNorm fwd+bwd [1024x512]", 0.0, [&] {
    k::layernorm_forward(x.data(), gamma.data(), beta.data(), n, c, y.data(), mean.data(),
                         rstd.data());
    k::layernorm_backward(x.data(), gamma.data(), mean.data(), rstd.data(), y.data(), n, c,
                          dx.data(), dgamma.data(), dbeta.data());
  });
  add("LM head + cross-entropy fwd+bwd (V=256)", 0.0, [&] {
    k::gemm(false, true, n, v, c, 1.0f, x.data(), c, wte.data(), c, 0.0f, logits.data(), v);
    k::cross_entropy_forward_backward(logits.data(), n, v, targets.data(),
                                      1.0f / static_cast<float>(n), dlogits.data());
  });
  // Llama: SwiGLU over the fused gate|up row [1024 x 2 x 2048], RMSNorm, RoPE on q|k|v rows.
  std::vector<float> gu = random(n * 2 * f, 11, 1.0), dgu(gu.size()), rope_cos(t * d / 2),
                     rope_sin(rope_cos.size());
  k::rope_tables(t, d, 10000.0, rope_cos.data(), rope_sin.data());
  add("SwiGLU fwd+bwd [1024x2048]", 0.0, [&] {
    k::swiglu_forward(gu.data(), n, f, g.data());
    k::swiglu_backward(gu.data(), g.data(), n, f, dgu.data());
  });
  add("RMSNorm fwd+bwd [1024x512]", 0.0, [&] {
    k::rmsnorm_forward(x.data(), gamma.data(), n, c, 1e-5f, y.data(), rstd.data());
    k::rmsnorm_backward(x.data(), gamma.data(), rstd.data(), y.data(), n, c, dx.data(),
                        dgamma.data());
  });
  add("RoPE fwd+bwd on q, k [1024x8x64]", 0.0, [&] {
    for (int part = 0; part < 2; ++part) {
      k::rope_forward(qkv.data() + part * c, b, t, h, d, 3 * c, rope_cos.data(), rope_sin.data());
      k::rope_backward(qkv.data() + part * c, b, t, h, d, 3 * c, rope_cos.data(), rope_sin.data());
    }
  });
  add("AdamW over 1M params", 0.0, [&] {
    k::adamw_step(w_fc.data(), dw_fc.data(), m.data(), vv.data(), c * f, 1, {.lr = 1e-9f});
  });
  add("gradient sum of squares over 1M params", 0.0,
      [&] { benchmark_sink = benchmark_sink + k::sum_of_squares(dw_fc.data(), c * f); });
  const double square = best_of(reps, [&] {
    static std::vector<float> a = random(1024 * 1024, 9, 1.0), bb = random(1024 * 1024, 10, 1.0),
                              cc(1024 * 1024);
    k::gemm(false, false, 1024, 1024, 1024, 1.0f, a.data(), 1024, bb.data(), 1024, 0.0f, cc.data(),
            1024);
  });
  const double sgemm = 2.0 * 1024.0 * 1024.0 * 1024.0 / square;

  double total = 0.0;
  for (const Row& r : rows) total += r.seconds;
  std::printf("blas: %s\n", k::blas_description().c_str());
  std::printf("reproduce: %s --threads %d --reps %d (best of %d)\n", argv[0], threads, reps, reps);
  std::printf("sgemm 1024^3: %.1f GFLOP/s at %d OpenBLAS thread(s)\n", sgemm / 1e9,
              k::blas_threads());
  std::printf("%-46s %9s %7s %10s %8s\n", "op", "ms", "share", "GFLOP/s", "/sgemm");
  for (const Row& r : rows) {
    if (r.flops > 0) {
      std::printf("%-46s %9.2f %6.1f%% %10.1f %8.2f\n", r.name.c_str(), r.seconds * 1e3,
                  100.0 * r.seconds / total, r.flops / r.seconds / 1e9,
                  r.flops / r.seconds / sgemm);
    } else {
      std::printf("%-46s %9.2f %6.1f%% %10s %8s\n", r.name.c_str(), r.seconds * 1e3,
                  100.0 * r.seconds / total, "-", "-");
    }
  }
  // Attention and the element-wise and row kernels in every ISA variant the host runs,
  // interleaved round by round so that all variants see the same machine load; best of `reps`.
  const std::vector<k::Isa> isas = k::supported_isas();
  std::printf("\nISA variants (best of %d, interleaved; speed-up of the best vs baseline):\n%-46s",
              reps, "op");
  for (k::Isa isa : isas) std::printf(" %9s", k::isa_name(isa));
  std::printf(" %9s\n", "speed-up");
  const k::Isa saved = k::active_isa();
  for (const Row& r : rows) {
    if (r.name.rfind("c_fc", 0) == 0) continue;  // all sgemm
    std::vector<double> best(isas.size(), 1e30);
    for (int rep = 0; rep < reps; ++rep) {
      for (size_t i = 0; i < isas.size(); ++i) {
        k::set_active_isa(isas[i]);
        best[i] = std::min(best[i], best_of(1, r.run));
      }
    }
    std::printf("%-46s", r.name.c_str());
    for (double s : best) std::printf(" %7.2fms", s * 1e3);
    std::printf(" %8.2fx\n", best.front() / best.back());
  }
  k::set_active_isa(saved);
  return 0;
}
