#include "model/moe_block.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <utility>

#include "kernels/cpu/matmul.h"
#include "kernels/cpu/swiglu.h"
#include "model/init.h"

namespace ntp::model {

namespace k = ntp::kernels::cpu;

namespace {

void resize(std::vector<float>& v, int64_t n) { v.resize(static_cast<size_t>(n)); }

using k::matmul_nn;
using k::matmul_nt;
using k::matmul_tn;

Status positive(const char* name, int64_t v) {
  if (v > 0) return ok_status();
  return invalid_argument(std::string("MoeConfig.") + name + " = " + std::to_string(v) +
                          " must be > 0");
}

}  // namespace

Status MoeConfig::validate() const {
  NTP_RETURN_IF_ERROR(positive("hidden", hidden));
  NTP_RETURN_IF_ERROR(positive("ffn", ffn));
  NTP_RETURN_IF_ERROR(positive("n_experts", n_experts));
  if (top_k < 1 || top_k > n_experts) {
    return invalid_argument("MoeConfig.top_k = " + std::to_string(top_k) +
                            " must lie in [1, n_experts = " + std::to_string(n_experts) + "]");
  }
  if (n_shared < 0) {
    return invalid_argument("MoeConfig.n_shared = " + std::to_string(n_shared) + " must be >= 0");
  }
  return ok_status();
}

MoeHolding MoeHolding::all(const MoeConfig& config) {
  MoeHolding h;
  h.experts.resize(static_cast<size_t>(config.n_experts));
  std::iota(h.experts.begin(), h.experts.end(), int64_t{0});
  h.lead = true;
  return h;
}

Status validate_holding(const MoeConfig& config, const MoeHolding& holding) {
  std::vector<bool> seen(static_cast<size_t>(std::max<int64_t>(config.n_experts, 0)), false);
  for (int64_t e : holding.experts) {
    if (e < 0 || e >= config.n_experts) {
      return invalid_argument("expert id " + std::to_string(e) + " is outside [0, n_experts = " +
                              std::to_string(config.n_experts) + ")");
    }
    if (seen[static_cast<size_t>(e)]) {
      return invalid_argument("expert " + std::to_string(e) + " is listed twice in one holding");
    }
    seen[static_cast<size_t>(e)] = true;
  }
  return ok_status();
}

Status validate_holdings(const MoeConfig& config, const std::vector<MoeHolding>& holdings) {
  std::vector<int> holders(static_cast<size_t>(std::max<int64_t>(config.n_experts, 0)), 0);
  int leads = 0;
  for (const MoeHolding& h : holdings) {
    NTP_RETURN_IF_ERROR(validate_holding(config, h));
    for (int64_t e : h.experts) ++holders[static_cast<size_t>(e)];
    leads += h.lead ? 1 : 0;
  }
  for (size_t e = 0; e < holders.size(); ++e) {
    if (holders[e] != 1) {
      return invalid_argument("expert " + std::to_string(e) + " is held by " +
                              std::to_string(holders[e]) + " ranks; each must be held by one");
    }
  }
  if (leads != 1) {
    return invalid_argument(std::to_string(leads) + " ranks are lead; exactly one must be");
  }
  return ok_status();
}

MoeBlock::MoeBlock(MoeConfig config, MoeHolding holding)
    : config_(config), holding_(std::move(holding)) {}

int MoeBlock::add_param(std::string name, std::vector<int64_t> shape) {
  Param p;
  p.name = std::move(name);
  p.logical_shape = std::move(shape);
  p.value = Tensor(p.logical_shape);
  p.grad = Tensor(p.logical_shape);
  params_.push_back(std::move(p));
  return static_cast<int>(params_.size()) - 1;
}

void MoeBlock::assign_indices() {
  int next = 0;
  router_ = next++;
  for (size_t j = 0; j < holding_.experts.size(); ++j) {
    ExpertParams x{};
    x.w1 = next++;
    x.w2 = next++;
    x.w3 = next++;
    experts_.push_back(x);
  }
  if (holding_.lead && config_.n_shared > 0) {
    shared_.w1 = next++;
    shared_.w3 = next++;
    shared_.w2 = next++;
  }
  acts_.resize(experts_.size());
  counts_.assign(static_cast<size_t>(config_.n_experts), 0);
}

Result<MoeBlock> MoeBlock::create(const MoeConfig& config, MoeHolding holding, uint64_t seed,
                                  std::string_view prefix, bool initialize) {
  NTP_RETURN_IF_ERROR(config.validate());
  NTP_RETURN_IF_ERROR(validate_holding(config, holding));
  MoeBlock b(config, std::move(holding));
  const int64_t c = config.hidden, f = config.ffn, fs = config.n_shared * config.ffn;
  const std::string p = std::string(prefix) + "block_sparse_moe.";
  b.add_param(p + "gate.weight", {config.n_experts, c});
  for (int64_t e : b.holding_.experts) {
    const std::string ep = p + "experts." + std::to_string(e) + ".";
    b.add_param(ep + "w1.weight", {f, c});
    b.add_param(ep + "w2.weight", {c, f});
    b.add_param(ep + "w3.weight", {f, c});
  }
  if (b.holding_.lead && fs > 0) {
    b.add_param(p + "shared_experts.gate_proj.weight", {fs, c});
    b.add_param(p + "shared_experts.up_proj.weight", {fs, c});
    b.add_param(p + "shared_experts.down_proj.weight", {c, fs});
  }
  if (initialize) {
    const InitRule rule{InitRule::Kind::kNormal, 0.02};
    for (Param& param : b.params_) {
      for (int64_t i = 0; i < param.value.numel(); ++i) {
        param.value[i] = init_value(seed, param.name, i, rule);
      }
    }
  }
  // The tensors' storage stays in place when the block (its params_ vector) moves.
  for (Param& param : b.params_) b.weights_.push_back({param.value.data(), param.grad.data()});
  b.assign_indices();
  return b;
}

Result<MoeBlock> MoeBlock::create_view(const MoeConfig& config, MoeHolding holding,
                                       std::vector<WeightView> weights) {
  NTP_RETURN_IF_ERROR(config.validate());
  NTP_RETURN_IF_ERROR(validate_holding(config, holding));
  const size_t expected = 1 + 3 * holding.experts.size() +
                          (holding.lead && config.n_shared > 0 ? size_t{3} : size_t{0});
  if (weights.size() != expected) {
    return invalid_argument("MoeBlock::create_view: " + std::to_string(weights.size()) +
                            " weight views given, the holding needs " + std::to_string(expected));
  }
  MoeBlock b(config, std::move(holding));
  b.weights_ = std::move(weights);
  b.assign_indices();
  return b;
}

void MoeBlock::zero_grad() {
  for (Param& p : params_) std::fill(p.grad.span().begin(), p.grad.span().end(), 0.0f);
}

void MoeBlock::swiglu_forward(int64_t m, int64_t f, const float* x, int w1, int w3, int w2,
                              float* gu, float* s, float* out) {
  const int64_t c = config_.hidden;
  matmul_nt(dtype_, m, f, c, x, c, w(w1), c, 0.0f, gu, 2 * f);
  matmul_nt(dtype_, m, f, c, x, c, w(w3), c, 0.0f, gu + f, 2 * f);
  k::swiglu_forward(gu, m, f, s);
  matmul_nt(dtype_, m, c, f, s, f, w(w2), f, 0.0f, out, c);
}

void MoeBlock::swiglu_backward(int64_t m, int64_t f, const float* x, const float* gu,
                               const float* s, const float* dout, int w1, int w3, int w2,
                               float* dx) {
  const int64_t c = config_.hidden;
  resize(ds_, m * f), resize(dgu_, m * 2 * f);
  matmul_nn(dtype_, m, f, c, dout, c, w(w2), f, 0.0f, ds_.data(), f);
  matmul_tn(dtype_, c, f, m, dout, c, s, f, 1.0f, dw(w2), f);
  k::swiglu_backward(gu, ds_.data(), m, f, dgu_.data());
  matmul_tn(dtype_, f, c, m, dgu_.data(), 2 * f, x, c, 1.0f, dw(w1), c);
  matmul_tn(dtype_, f, c, m, dgu_.data() + f, 2 * f, x, c, 1.0f, dw(w3), c);
  matmul_nn(dtype_, m, c, f, dgu_.data(), 2 * f, w(w1), c, 0.0f, dx, c);
  matmul_nn(dtype_, m, c, f, dgu_.data() + f, 2 * f, w(w3), c, 1.0f, dx, c);
}

Result<double> MoeBlock::route(std::span<const float> h, int64_t n) {
  const int64_t c = config_.hidden, ne = config_.n_experts, kk = config_.top_k;
  if (n < 1 || static_cast<int64_t>(h.size()) != n * c) {
    return invalid_argument("MoeBlock::route: h must hold n * hidden = " + std::to_string(n) +
                            " * " + std::to_string(c) + " floats (n >= 1); got " +
                            std::to_string(h.size()));
  }
  n_ = n;
  h_.assign(h.begin(), h.end());
  resize(probs_, n * ne);
  matmul_nt(k::MatmulDtype::kFp32, n, ne, c, h_.data(), c, w(router_), c, 0.0f, probs_.data(), ne);
  selected_.resize(static_cast<size_t>(n * kk));
  resize(combine_, n * kk);
  std::fill(counts_.begin(), counts_.end(), 0);
  std::vector<int64_t> order(static_cast<size_t>(ne));
  for (int64_t t = 0; t < n; ++t) {
    float* p = probs_.data() + t * ne;
    const float mx = *std::max_element(p, p + ne);
    double z = 0.0;
    for (int64_t e = 0; e < ne; ++e) z += (p[e] = std::exp(p[e] - mx));
    for (int64_t e = 0; e < ne; ++e) p[e] = static_cast<float>(p[e] / z);
    std::iota(order.begin(), order.end(), int64_t{0});
    std::partial_sort(order.begin(), order.begin() + kk, order.end(),
                      [p](int64_t a, int64_t b) { return p[a] > p[b] || (p[a] == p[b] && a < b); });
    double sum = 0.0;
    for (int64_t j = 0; j < kk; ++j) sum += p[order[static_cast<size_t>(j)]];
    for (int64_t j = 0; j < kk; ++j) {
      const int64_t e = order[static_cast<size_t>(j)];
      selected_[static_cast<size_t>(t * kk + j)] = e;
      combine_[static_cast<size_t>(t * kk + j)] =
          config_.normalize_top_k ? static_cast<float>(p[e] / sum) : p[e];
      ++counts_[static_cast<size_t>(e)];
    }
  }
  double aux = 0.0;
  for (int64_t e = 0; e < ne; ++e) {
    double mean_p = 0.0;
    for (int64_t t = 0; t < n; ++t) mean_p += probs_[static_cast<size_t>(t * ne + e)];
    aux += static_cast<double>(counts_[static_cast<size_t>(e)]) / static_cast<double>(n) *
           (mean_p / static_cast<double>(n));
  }
  return aux * static_cast<double>(ne);
}

void MoeBlock::run_held_experts(const float* source) {
  const int64_t c = config_.hidden, f = config_.ffn;
  for (size_t j = 0; j < experts_.size(); ++j) {
    ExpertActs& a = acts_[j];
    const int64_t m = static_cast<int64_t>(a.token.size());
    resize(a.x, m * c), resize(a.gu, m * 2 * f), resize(a.s, m * f), resize(a.out, m * c);
    if (m == 0) continue;
    for (int64_t r = 0; r < m; ++r) {
      std::copy_n(source + a.token[static_cast<size_t>(r)] * c, c, a.x.data() + r * c);
    }
    const ExpertParams& ep = experts_[j];
    swiglu_forward(m, f, a.x.data(), ep.w1, ep.w3, ep.w2, a.gu.data(), a.s.data(), a.out.data());
  }
}

void MoeBlock::held_expert_backward(size_t j) {
  const ExpertActs& a = acts_[j];
  const int64_t m = static_cast<int64_t>(a.token.size());
  resize(dx_, m * config_.hidden);
  const ExpertParams& ep = experts_[j];
  swiglu_backward(m, config_.ffn, a.x.data(), a.gu.data(), a.s.data(), dout_.data(), ep.w1, ep.w3,
                  ep.w2, dx_.data());
}

Result<double> MoeBlock::forward(std::span<const float> h, int64_t n, std::span<float> y) {
  const int64_t c = config_.hidden, ne = config_.n_experts, kk = config_.top_k;
  if (n < 1 || static_cast<int64_t>(h.size()) != n * c || static_cast<int64_t>(y.size()) != n * c) {
    return invalid_argument(
        "MoeBlock::forward: h and y must hold n * hidden = " + std::to_string(n) + " * " +
        std::to_string(c) + " floats (n >= 1); got " + std::to_string(h.size()) + " and " +
        std::to_string(y.size()));
  }
  NTP_ASSIGN_OR_RETURN(const double aux, route(h, n));

  // ---- routed experts: gather each held expert's tokens, one SwiGLU per expert, scatter ----
  std::fill(y.begin(), y.end(), 0.0f);
  std::vector<int64_t> local(static_cast<size_t>(ne), -1);  // expert id -> held index
  for (size_t j = 0; j < holding_.experts.size(); ++j) {
    local[static_cast<size_t>(holding_.experts[j])] = static_cast<int64_t>(j);
    acts_[j].token.clear();
    acts_[j].slot.clear();
  }
  for (int64_t t = 0; t < n; ++t) {
    for (int64_t j = 0; j < kk; ++j) {
      const int64_t held = local[static_cast<size_t>(selected_[static_cast<size_t>(t * kk + j)])];
      if (held < 0) continue;
      acts_[static_cast<size_t>(held)].token.push_back(t);
      acts_[static_cast<size_t>(held)].slot.push_back(j);
    }
  }
  run_held_experts(h_.data());
  for (const ExpertActs& a : acts_) {
    for (size_t r = 0; r < a.token.size(); ++r) {
      const int64_t t = a.token[r];
      const float wt = combine_[static_cast<size_t>(t * kk + a.slot[r])];
      const float* o = a.out.data() + static_cast<int64_t>(r) * c;
      float* yt = y.data() + t * c;
      for (int64_t i = 0; i < c; ++i) yt[i] += wt * o[i];
    }
  }

  // ---- shared experts (the lead): every token, weight 1 ----
  if (shared_.w1 >= 0) {
    const int64_t fs = config_.n_shared * config_.ffn;
    resize(shared_gu_, n * 2 * fs), resize(shared_s_, n * fs), resize(dx_, n * c);
    swiglu_forward(n, fs, h_.data(), shared_.w1, shared_.w3, shared_.w2, shared_gu_.data(),
                   shared_s_.data(), dx_.data());
    for (int64_t i = 0; i < n * c; ++i) y[static_cast<size_t>(i)] += dx_[static_cast<size_t>(i)];
  }
  return aux;
}

Status MoeBlock::experts_forward(std::span<const float> x, std::span<const int64_t> expert,
                                 std::span<float> out) {
  const int64_t c = config_.hidden, m = static_cast<int64_t>(expert.size());
  if (static_cast<int64_t>(x.size()) != m * c || static_cast<int64_t>(out.size()) != m * c) {
    return invalid_argument("MoeBlock::experts_forward: x and out must hold " + std::to_string(m) +
                            " rows of hidden = " + std::to_string(c) + " floats; got " +
                            std::to_string(x.size()) + " and " + std::to_string(out.size()));
  }
  std::vector<int64_t> local(static_cast<size_t>(config_.n_experts), -1);
  for (size_t j = 0; j < holding_.experts.size(); ++j) {
    local[static_cast<size_t>(holding_.experts[j])] = static_cast<int64_t>(j);
    acts_[j].token.clear();
    acts_[j].slot.clear();
  }
  for (int64_t r = 0; r < m; ++r) {
    const int64_t e = expert[static_cast<size_t>(r)];
    const int64_t held = e >= 0 && e < config_.n_experts ? local[static_cast<size_t>(e)] : -1;
    if (held < 0) {
      return invalid_argument("MoeBlock::experts_forward: row " + std::to_string(r) +
                              " is for expert " + std::to_string(e) +
                              ", which this rank does not hold");
    }
    acts_[static_cast<size_t>(held)].token.push_back(r);
  }
  rows_ = m;
  run_held_experts(x.data());
  for (const ExpertActs& a : acts_) {
    for (size_t r = 0; r < a.token.size(); ++r) {
      std::copy_n(a.out.data() + static_cast<int64_t>(r) * c, c, out.data() + a.token[r] * c);
    }
  }
  return ok_status();
}

Status MoeBlock::experts_backward(std::span<const float> dout, std::span<float> dx) {
  const int64_t c = config_.hidden;
  if (rows_ < 0) return failed_precondition("MoeBlock::experts_backward before experts_forward");
  if (static_cast<int64_t>(dout.size()) != rows_ * c ||
      static_cast<int64_t>(dx.size()) != rows_ * c) {
    return invalid_argument("MoeBlock::experts_backward: dout and dx must hold the " +
                            std::to_string(rows_) + " rows of the last experts_forward (" +
                            std::to_string(rows_ * c) + " floats); got " +
                            std::to_string(dout.size()) + " and " + std::to_string(dx.size()));
  }
  for (size_t j = 0; j < acts_.size(); ++j) {
    const ExpertActs& a = acts_[j];
    const int64_t m = static_cast<int64_t>(a.token.size());
    if (m == 0) continue;
    resize(dout_, m * c);
    for (int64_t r = 0; r < m; ++r) {
      std::copy_n(dout.data() + a.token[static_cast<size_t>(r)] * c, c, dout_.data() + r * c);
    }
    held_expert_backward(j);
    for (int64_t r = 0; r < m; ++r) {
      std::copy_n(dx_.data() + r * c, c, dx.data() + a.token[static_cast<size_t>(r)] * c);
    }
  }
  return ok_status();
}

Status MoeBlock::backward(std::span<const float> dy, double aux_coef, std::span<float> dh) {
  if (n_ < 0) return failed_precondition("MoeBlock::backward called before any forward");
  // d(coef aux)/d probs[t, e] = coef * E * count_e / n^2 (f_e held constant).
  const double nn = static_cast<double>(n_) * static_cast<double>(n_);
  std::vector<double> aux_dprobs(static_cast<size_t>(config_.n_experts), 0.0);
  for (size_t e = 0; e < aux_dprobs.size(); ++e) {
    aux_dprobs[e] =
        aux_coef * static_cast<double>(config_.n_experts) * static_cast<double>(counts_[e]) / nn;
  }
  return backward(dy, aux_dprobs, dh);
}

Status MoeBlock::backward(std::span<const float> dy, std::span<const double> aux_dprobs,
                          std::span<float> dh) {
  if (n_ < 0) return failed_precondition("MoeBlock::backward called before any forward");
  const int64_t n = n_, c = config_.hidden, kk = config_.top_k;
  if (static_cast<int64_t>(dy.size()) != n * c || static_cast<int64_t>(dh.size()) != n * c) {
    return invalid_argument(
        "MoeBlock::backward: dy and dh must hold n * hidden = " + std::to_string(n) + " * " +
        std::to_string(c) + " floats (n of the last forward); got " + std::to_string(dy.size()) +
        " and " + std::to_string(dh.size()));
  }
  std::fill(dh.begin(), dh.end(), 0.0f);
  // dcombine [n, k]: dL/d(combine weight) of this rank's experts' slots (others stay 0).
  std::vector<float> dcombine(static_cast<size_t>(n * kk), 0.0f);

  // ---- routed experts ----
  for (size_t j = 0; j < experts_.size(); ++j) {
    const ExpertActs& a = acts_[j];
    const int64_t m = static_cast<int64_t>(a.token.size());
    if (m == 0) continue;
    resize(dout_, m * c);
    for (int64_t r = 0; r < m; ++r) {
      const int64_t t = a.token[static_cast<size_t>(r)];
      const size_t ts = static_cast<size_t>(t * kk + a.slot[static_cast<size_t>(r)]);
      const float wt = combine_[ts];
      const float* dyt = dy.data() + t * c;
      const float* o = a.out.data() + r * c;
      double dot = 0.0;
      for (int64_t i = 0; i < c; ++i) {
        dout_[static_cast<size_t>(r * c + i)] = wt * dyt[i];
        dot += static_cast<double>(dyt[i]) * o[i];
      }
      dcombine[ts] = static_cast<float>(dot);
    }
    held_expert_backward(j);
    for (int64_t r = 0; r < m; ++r) {
      float* dht = dh.data() + a.token[static_cast<size_t>(r)] * c;
      const float* dxr = dx_.data() + r * c;
      for (int64_t i = 0; i < c; ++i) dht[i] += dxr[i];
    }
  }

  // ---- shared experts (the lead) ----
  if (shared_.w1 >= 0) {
    resize(dx_, n * c);
    swiglu_backward(n, config_.n_shared * config_.ffn, h_.data(), shared_gu_.data(),
                    shared_s_.data(), dy.data(), shared_.w1, shared_.w3, shared_.w2, dx_.data());
    for (int64_t i = 0; i < n * c; ++i) dh[static_cast<size_t>(i)] += dx_[static_cast<size_t>(i)];
  }
  return router_backward(dcombine, aux_dprobs, holding_.lead, dh);
}

Status MoeBlock::router_backward(std::span<const float> dcombine,
                                 std::span<const double> aux_dprobs, bool add_aux,
                                 std::span<float> dh) {
  if (n_ < 0) return failed_precondition("MoeBlock::router_backward called before any route");
  const int64_t n = n_, c = config_.hidden, ne = config_.n_experts, kk = config_.top_k;
  if (static_cast<int64_t>(dcombine.size()) != n * kk ||
      static_cast<int64_t>(aux_dprobs.size()) != ne || static_cast<int64_t>(dh.size()) != n * c) {
    return invalid_argument(
        "MoeBlock::router_backward: dcombine, aux_dprobs and dh must hold " +
        std::to_string(n * kk) + ", " + std::to_string(ne) + " and " + std::to_string(n * c) +
        " values; got " + std::to_string(dcombine.size()) + ", " +
        std::to_string(aux_dprobs.size()) + " and " + std::to_string(dh.size()));
  }
  // dprobs [n, E] then, in place, dlogits.
  std::vector<float> dl(static_cast<size_t>(n * ne), 0.0f);
  for (int64_t t = 0; t < n; ++t) {
    const float* p = probs_.data() + t * ne;
    float* d = dl.data() + t * ne;
    const int64_t* sel = selected_.data() + t * kk;
    const float* dw_t = dcombine.data() + t * kk;
    if (config_.normalize_top_k) {
      // combine_j = p_j / S, S = sum of the selected p: dp_l = (dcombine_l - sum_j dcombine_j
      // combine_j) / S.
      double sum = 0.0, wdot = 0.0;
      for (int64_t j = 0; j < kk; ++j) {
        sum += p[sel[j]];
        wdot += static_cast<double>(dw_t[j]) * combine_[static_cast<size_t>(t * kk + j)];
      }
      for (int64_t j = 0; j < kk; ++j) d[sel[j]] = static_cast<float>((dw_t[j] - wdot) / sum);
    } else {
      for (int64_t j = 0; j < kk; ++j) d[sel[j]] = dw_t[j];
    }
  }
  if (add_aux) {
    for (int64_t e = 0; e < ne; ++e) {
      const float g = static_cast<float>(aux_dprobs[static_cast<size_t>(e)]);
      if (g == 0.0f) continue;
      for (int64_t t = 0; t < n; ++t) dl[static_cast<size_t>(t * ne + e)] += g;
    }
  }
  for (int64_t t = 0; t < n; ++t) {
    const float* p = probs_.data() + t * ne;
    float* d = dl.data() + t * ne;
    double pd = 0.0;
    for (int64_t e = 0; e < ne; ++e) pd += static_cast<double>(p[e]) * d[e];
    for (int64_t e = 0; e < ne; ++e) d[e] = static_cast<float>(p[e] * (d[e] - pd));
  }
  matmul_tn(k::MatmulDtype::kFp32, ne, c, n, dl.data(), ne, h_.data(), c, 1.0f, dw(router_), c);
  matmul_nn(k::MatmulDtype::kFp32, n, c, ne, dl.data(), ne, w(router_), c, 1.0f, dh.data(), c);
  return ok_status();
}

}  // namespace ntp::model
