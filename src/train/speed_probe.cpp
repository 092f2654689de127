#include "train/speed_probe.h"

#include <algorithm>
#include <vector>

#include "core/cpu_clock.h"
#include "kernels/cpu/gemm.h"

namespace ntp::train {
namespace {

constexpr int kSize = 128;
constexpr int kRepeats = 8;

}  // namespace

double probe_cpu_seconds() {
  std::vector<float> a(kSize * kSize, 0.5f), b(kSize * kSize, 0.25f), c(kSize * kSize, 0.0f);
  double best = 0.0;
  for (int run = 0; run < 3; ++run) {
    const double start = ntp::thread_cpu_seconds();
    for (int k = 0; k < kRepeats; ++k) {
      kernels::cpu::gemm(false, false, kSize, kSize, kSize, 1.0f, a.data(), kSize, b.data(), kSize,
                         0.0f, c.data(), kSize);
    }
    const double took = ntp::thread_cpu_seconds() - start;
    best = run == 0 ? took : std::min(best, took);
  }
  return std::max(best, 1e-9);
}

double probe_speed(double baseline_s, double factor) {
  const double stretched = probe_cpu_seconds() / std::max(factor, 1e-9);
  return baseline_s / stretched;
}

}  // namespace ntp::train
