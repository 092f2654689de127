#include "kernels/cpu/clip.h"

#include <algorithm>
#include <vector>

#include "core/check.h"
#include "kernels/cpu/isa_dispatch.h"
#include "kernels/cpu/lane_sum.h"
#include "kernels/cpu/parallel.h"

namespace ntp::kernels::cpu {
namespace {
NTP_ISA_INLINE void scale_body(float* x, int64_t n, float factor) {
  for (int64_t i = 0; i < n; ++i) x[i] *= factor;
}
NTP_ISA_VARIANTS(scale_isa, scale_body)

// lane_sum: vectorized, and the same result in every ISA variant.
NTP_ISA_INLINE double sum_of_squares_body(const float* x, int64_t n) {
  return lane_sum<double>(n, [x](int64_t i) {
    const double v = x[i];
    return v * v;
  });
}
NTP_ISA_VARIANTS(sum_of_squares_isa, sum_of_squares_body)
}  // namespace

double sum_of_squares(const float* x, int64_t n) {
  // Fixed chunks, each a lane_sum, added in chunk order: the same result at any thread count.
  constexpr int64_t kChunk = int64_t{1} << 16;
  const int64_t chunks = (n + kChunk - 1) / kChunk;
  if (chunks <= 1) return sum_of_squares_isa(x, n);
  std::vector<double> partial(static_cast<size_t>(chunks));
  parallel_for(chunks, 1, [&](int64_t c0, int64_t c1) {
    for (int64_t c = c0; c < c1; ++c) {
      const int64_t begin = c * kChunk;
      partial[static_cast<size_t>(c)] = sum_of_squares_isa(x + begin, std::min(kChunk, n - begin));
    }
  });
  double sum = 0.0;
  for (double p : partial) sum += p;
  return sum;
}

float clip_coefficient(double global_norm, double max_norm) {
  NTP_CHECK(max_norm > 0.0);
  const double c = max_norm / (global_norm + 1e-6);
  return c < 1.0 ? static_cast<float>(c) : 1.0f;
}

void scale_in_place(float* x, int64_t n, float factor) { scale_isa(x, n, factor); }

}  // namespace ntp::kernels::cpu
