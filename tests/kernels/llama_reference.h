// Plain float64 references of the Llama ops (rotary embedding, SwiGLU; RMSNorm and grouped-KV
// attention are in reference.h), written from their definitions (Hugging Face transformers'
// apply_rotary_pos_emb with rotate_half, LlamaMLP's act_fn(gate) * up), independent of the
// float32 kernels.
#pragma once

#include <cmath>
#include <cstdint>
#include <vector>

namespace ntp::kernels::reference {

// x[b*t rows of ld values], h heads of d at offset head * d; position of row r is r % t.
// out = x * cos + rotate_half(x) * sin, rotate_half(v) = concat(-v[d/2:], v[:d/2]). Values past
// h * d in a row are copied unchanged.
inline std::vector<double> rope(const std::vector<double>& x, int64_t rows, int64_t t, int64_t h,
                                int64_t d, int64_t ld, double theta) {
  std::vector<double> y = x;
  const int64_t half = d / 2;
  for (int64_t r = 0; r < rows; ++r) {
    const double pos = static_cast<double>(r % t);
    for (int64_t head = 0; head < h; ++head) {
      const double* v = x.data() + r * ld + head * d;
      double* out = y.data() + r * ld + head * d;
      for (int64_t e = 0; e < d; ++e) {
        const int64_t i = e % half;  // cos/sin are the half-size tables repeated twice
        const double angle =
            pos * std::pow(theta, -2.0 * static_cast<double>(i) / static_cast<double>(d));
        const double rotated = e < half ? -v[e + half] : v[e - half];
        out[e] = v[e] * std::cos(angle) + rotated * std::sin(angle);
      }
    }
  }
  return y;
}

// gu[n, 2f] = [gate | up] per row -> out[n, f] = silu(gate) * up
inline std::vector<double> swiglu(const std::vector<double>& gu, int64_t n, int64_t f) {
  std::vector<double> out(static_cast<size_t>(n * f));
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t j = 0; j < f; ++j) {
      const double g = gu[i * 2 * f + j], u = gu[i * 2 * f + f + j];
      out[i * f + j] = g / (1.0 + std::exp(-g)) * u;
    }
  }
  return out;
}

}  // namespace ntp::kernels::reference
