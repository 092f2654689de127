// Plain float64 reference implementations of the GPT-2 ops, written independently of the
// optimized float32 kernels (naive loops, no BLAS, no fusion), plus a finite-difference helper.
// Shapes follow the kernels' headers in kernels/cpu/.
#pragma once

#include <algorithm>
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

// y[n, c] = x / sqrt(mean(x^2) + eps) * w
inline Vec rmsnorm(const Vec& x, const Vec& w, int64_t n, int64_t c, double eps) {
  Vec y(x.size());
  for (int64_t i = 0; i < n; ++i) {
    double ms = 0.0;
    for (int64_t j = 0; j < c; ++j) ms += x[i * c + j] * x[i * c + j];
    const double rs = 1.0 / std::sqrt(ms / static_cast<double>(c) + eps);
    for (int64_t j = 0; j < c; ++j) y[i * c + j] = x[i * c + j] * rs * w[j];
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

// Causal attention with grouped KV heads: q[b, t, h*d], k and v [b, t, kv_heads*d]; query head j
// attends with KV head j / (h / kv_heads) (Llama's repeat_kv; kv_heads = h is plain multi-head).
// out[b, t, h*d], scores scaled by 1/sqrt(d).
inline Vec causal_attention(const Vec& q, const Vec& k, const Vec& v, int64_t bsz, int64_t t,
                            int64_t h, int64_t kv_heads, int64_t d) {
  Vec out(static_cast<size_t>(bsz * t * h * d), 0.0);
  auto at = [&](int64_t b, int64_t i, int64_t heads, int64_t head) {
    return ((b * t + i) * heads + head) * d;
  };
  for (int64_t b = 0; b < bsz; ++b)
    for (int64_t head = 0; head < h; ++head) {
      const int64_t kv = head / (h / kv_heads);
      for (int64_t i = 0; i < t; ++i) {
        Vec s(static_cast<size_t>(i + 1));
        double mx = -1e300;
        for (int64_t j = 0; j <= i; ++j) {
          double dotp = 0.0;
          for (int64_t e = 0; e < d; ++e)
            dotp += q[at(b, i, h, head) + e] * k[at(b, j, kv_heads, kv) + e];
          s[j] = dotp / std::sqrt(static_cast<double>(d));
          mx = std::max(mx, s[j]);
        }
        double z = 0.0;
        for (double& e : s) z += (e = std::exp(e - mx));
        for (int64_t j = 0; j <= i; ++j)
          for (int64_t e = 0; e < d; ++e)
            out[at(b, i, h, head) + e] += s[j] / z * v[at(b, j, kv_heads, kv) + e];
      }
    }
  return out;
}

// qkv[b, t, 3*h*d] (each row q, then k, then v) -> out[b, t, h*d], causal multi-head attention.
inline Vec attention(const Vec& qkv, int64_t bsz, int64_t t, int64_t h, int64_t d) {
  const int64_t hd = h * d, rows = bsz * t;
  Vec q(static_cast<size_t>(rows * hd)), k(q.size()), v(q.size());
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t e = 0; e < hd; ++e) {
      q[r * hd + e] = qkv[r * 3 * hd + e];
      k[r * hd + e] = qkv[r * 3 * hd + hd + e];
      v[r * hd + e] = qkv[r * 3 * hd + 2 * hd + e];
    }
  return causal_attention(q, k, v, bsz, t, h, h, d);
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
