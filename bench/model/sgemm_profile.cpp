// Where a program's time in sgemm goes, by product shape: an LD_PRELOAD library that wraps
// cblas_sgemm, times every call (thread CPU time: at one BLAS thread it excludes preemption by
// other jobs) and prints, at exit, one line per (op(A), op(B), M, N, K, beta = 0 or not) with its
// calls, total time, mean and best GFLOP/s, then the per-step totals of the small products
// (attention: every dimension <= 512 and one of them 64 or less) and of the others.
//
//   LD_PRELOAD=build/bench/model/libntp_sgemm_profile.so NTP_SGEMM_PROFILE_STEPS=11
//       build/bench/model/model_train_step_bench --rounds 10 --sgemm 0     (one command line)
//
// NTP_SGEMM_PROFILE_STEPS: the number of steps the program ran (warm-up included), to print
// per-step figures. NTP_SGEMM_SKIP_AFTER=N: calls after the first N return at once without
// computing, so a step benchmark then times everything but its products (N = the sgemm calls of
// the warm-up step, printed by a first run: the results stay those of the warm-up step).
#include <dlfcn.h>

#include <cstdio>
#include <cstdlib>
#include <map>
#include <mutex>
#include <tuple>

#include "core/cpu_clock.h"

namespace {

using SgemmFn = void (*)(int, int, int, int, int, int, float, const float*, int, const float*, int,
                         float, float*, int);

struct Stat {
  double seconds = 0.0, best = 1e30;
  long calls = 0;
};
using Key = std::tuple<int, int, int, int, int, int>;  // trans_a, trans_b, m, n, k, beta != 0

std::mutex mu;
std::map<Key, Stat>* stats = nullptr;
long total_calls = 0;

long env_long(const char* name, long fallback) {
  const char* v = std::getenv(name);
  return v != nullptr ? std::atol(v) : fallback;
}

bool is_small(int m, int n, int k) {
  return m <= 512 && n <= 512 && k <= 512 && (m <= 64 || n <= 64 || k <= 64);
}

struct Report {
  ~Report() {
    if (stats == nullptr) return;
    const double steps = static_cast<double>(env_long("NTP_SGEMM_PROFILE_STEPS", 1));
    double small_s = 0, small_f = 0, other_s = 0, other_f = 0;
    std::fprintf(stderr, "sgemm profile: %ld calls\n", total_calls);
    for (const auto& [key, s] : *stats) {
      const auto [ta, tb, m, n, k, beta] = key;
      const double flops = 2.0 * m * n * k;
      std::fprintf(stderr,
                   "  %c%c beta%d %5d x %5d x %5d  calls %6ld  %9.2f ms  mean %6.1f GFLOP/s  "
                   "best %6.1f GFLOP/s\n",
                   ta == CblasTransValue ? 't' : 'n', tb == CblasTransValue ? 't' : 'n', beta, m, n,
                   k, s.calls, s.seconds * 1e3,
                   flops * static_cast<double>(s.calls) / s.seconds / 1e9, flops / s.best / 1e9);
      (is_small(m, n, k) ? small_s : other_s) += s.seconds;
      (is_small(m, n, k) ? small_f : other_f) += flops * static_cast<double>(s.calls);
    }
    std::fprintf(stderr,
                 "per step: small products %.2f ms, %.3f GFLOP, %.1f GFLOP/s; other products %.2f "
                 "ms, %.3f GFLOP, %.1f GFLOP/s\n",
                 small_s / steps * 1e3, small_f / steps / 1e9, small_f / small_s / 1e9,
                 other_s / steps * 1e3, other_f / steps / 1e9, other_f / other_s / 1e9);
  }
  static constexpr int CblasTransValue = 112;  // CblasTrans in cblas.h
};
Report report;

}  // namespace

extern "C" void cblas_sgemm(int order, int trans_a, int trans_b, int m, int n, int k, float alpha,
                            const float* a, int lda, const float* b, int ldb, float beta, float* c,
                            int ldc) {
  static const SgemmFn real = reinterpret_cast<SgemmFn>(dlsym(RTLD_NEXT, "cblas_sgemm"));
  static const long skip_after = env_long("NTP_SGEMM_SKIP_AFTER", -1);
  long call = 0;
  {
    std::lock_guard<std::mutex> lock(mu);
    call = ++total_calls;
  }
  if (skip_after >= 0 && call > skip_after) return;
  const double t0 = ntp::thread_cpu_seconds();
  real(order, trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
  const double dt = ntp::thread_cpu_seconds() - t0;
  std::lock_guard<std::mutex> lock(mu);
  if (stats == nullptr) stats = new std::map<Key, Stat>;
  Stat& s = (*stats)[{trans_a, trans_b, m, n, k, beta != 0.0f ? 1 : 0}];
  s.seconds += dt;
  s.best = dt < s.best ? dt : s.best;
  ++s.calls;
}
