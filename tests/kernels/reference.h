// Plain float64 reference implementations of the GPT-2 ops, written independently of the
// optimized float32 kernels (naive loops, no BLAS, no fusion), plus a finite-difference helper.
// Shapes follow the kernels' headers in kernels/cpu/.
#pragma once

#include <cmath>
#include <cstdint>
#include <functional>
#include <vector>

#include "core/rng.h"

namespace ntp::kernels::reference {

using Vec = std::vector<double>;

inline Vec random_vec(Rng& rng, int64_t n, double scale = 1.0) {
  Vec v(static_cast<size_t>(n));
  for (double& x : v) x = rng.normal() * scale;
  return v;
}

inline std::vector<float> to_float(const Vec& v) {
  std::vector<float> f(v.size());
  for (size_t i = 0; i < v.size(); ++i) f[i] = static_cast<float>(v[i]);
  return f;
}

inline Vec to_double(const std::vector<float>& v) { return Vec(v.begin(), v.end()); }

// Central differences of a scalar function of x (float64).
inline Vec numeric_grad(const std::function<double(const Vec&)>& f, Vec x, double h = 1e-5) {
  Vec g(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    const double x0 = x[i];
    x[i] = x0 + h;
    const double fp = f(x);
    x[i] = x0 - h;
    const double fm = f(x);
    x[i] = x0;
    g[i] = (fp - fm) / (2 * h);
  }
  return g;
}

// ||a - b|| / max(||b||, tiny): the error measure every test uses.
inline double rel_error(const Vec& a, const Vec& b) {
  double num = 0.0, den = 0.0;
  for (size_t i = 0; i < a.size(); ++i) {
    num += (a[i] - b[i]) * (a[i] - b[i]);
    den += b[i] * b[i];
  }
  return std::sqrt(num) / std::max(std::sqrt(den), 1e-30);
}

inline double dot(const Vec& a, const Vec& b) {
  double s = 0.0;
  for (size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
  return s;
}

// y[n, out] = x[n, in] w[in, out] + b[out]
inline Vec linear(const Vec& x, const Vec& w, const Vec& b, int64_t n, int64_t in, int64_t out) {
  Vec y(static_cast<size_t>(n * out));
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < out; ++j) {
      double s = b.empty() ? 0.0 : b[j];
      for (int64_t k = 0; k < in; ++k) s += x[i * in + k] * w[k * out + j];
      y[i * out + j] = s;
    }
  return y;
}

inline Vec layernorm(const Vec& x, const Vec& g, const Vec& b, int64_t n, int64_t c) {
  Vec y(x.size());
  for (int64_t i = 0; i < n; ++i) {
    double mu = 0.0;
    for (int64_t j = 0; j < c; ++j) mu += x[i * c + j];
    mu /= static_cast<double>(c);
    double var = 0.0;
    for (int64_t j = 0; j < c; ++j) var += (x[i * c + j] - mu) * (x[i * c + j] - mu);
    var /= static_cast<double>(c);
    const double rs = 1.0 / std::sqrt(var + 1e-5);
    for (int64_t j = 0; j < c; ++j) y[i * c + j] = (x[i * c + j] - mu) * rs * g[j] + b[j];
  }
  return y;
}

inline Vec gelu(const Vec& x) {
  Vec y(x.size());
  const double s = std::sqrt(2.0 / M_PI);
  for (size_t i = 0; i < x.size(); ++i)
    y[i] = 0.5 * x[i] * (1.0 + std::tanh(s * (x[i] + 0.044715 * x[i] * x[i] * x[i])));
  return y;
}

// qkv[b, t, 3*h*d] -> out[b, t, h*d], causal, scaled by 1/sqrt(d).
inline Vec attention(const Vec& qkv, int64_t bsz, int64_t t, int64_t h, int64_t d) {
  const int64_t hd = h * d, row = 3 * hd;
  Vec out(static_cast<size_t>(bsz * t * hd), 0.0);
  for (int64_t b = 0; b < bsz; ++b)
    for (int64_t head = 0; head < h; ++head)
      for (int64_t i = 0; i < t; ++i) {
        Vec s(static_cast<size_t>(i + 1));
        double mx = -1e300;
        for (int64_t j = 0; j <= i; ++j) {
          double v = 0.0;
          for (int64_t e = 0; e < d; ++e)
            v += qkv[(b * t + i) * row + head * d + e] * qkv[(b * t + j) * row + hd + head * d + e];
          s[j] = v / std::sqrt(static_cast<double>(d));
          mx = std::max(mx, s[j]);
        }
        double z = 0.0;
        for (double& v : s) z += (v = std::exp(v - mx));
        for (int64_t j = 0; j <= i; ++j)
          for (int64_t e = 0; e < d; ++e)
            out[(b * t + i) * hd + head * d + e] +=
                s[j] / z * qkv[(b * t + j) * row + 2 * hd + head * d + e];
      }
  return out;
}

// lse[b, head, i] = log sum_{j <= i} exp(q_i . k_j / sqrt(d)): what attention_forward saves.
inline Vec attention_logsumexp(const Vec& qkv, int64_t bsz, int64_t t, int64_t h, int64_t d) {
  const int64_t hd = h * d, row = 3 * hd;
  Vec lse(static_cast<size_t>(bsz * h * t));
  for (int64_t b = 0; b < bsz; ++b)
    for (int64_t head = 0; head < h; ++head)
      for (int64_t i = 0; i < t; ++i) {
        double z = 0.0;
        for (int64_t j = 0; j <= i; ++j) {
          double v = 0.0;
          for (int64_t e = 0; e < d; ++e)
            v += qkv[(b * t + i) * row + head * d + e] * qkv[(b * t + j) * row + hd + head * d + e];
          z += std::exp(v / std::sqrt(static_cast<double>(d)));
        }
        lse[(b * h + head) * t + i] = std::log(z);
      }
  return lse;
}

// Mean-free sum of per-row cross-entropy losses over the full vocabulary.
inline double cross_entropy_sum(const Vec& logits, const std::vector<int32_t>& y, int64_t n,
                                int64_t v) {
  double total = 0.0;
  for (int64_t i = 0; i < n; ++i) {
    double mx = -1e300;
    for (int64_t j = 0; j < v; ++j) mx = std::max(mx, logits[i * v + j]);
    double z = 0.0;
    for (int64_t j = 0; j < v; ++j) z += std::exp(logits[i * v + j] - mx);
    total += std::log(z) + mx - logits[i * v + y[i]];
  }
  return total;
}

}  // namespace ntp::kernels::reference
