#include "sim/workload.h"

#include <algorithm>
#include <cmath>

#include "shard/balance.h"
#include "sim/recovery_cost.h"
#include "sim/slow_events.h"
#include "sim/weighted_split.h"

namespace ntp::sim {

namespace {

// One expert's columns (a MoE), or the dense FFN's.
double ffn_columns(const ModelConfig& m) {
  return (m.moe() ? m.expert_ffn_multiplier : m.ffn_multiplier) * m.hidden;
}
// FFN columns a token runs through per layer: top_k experts' of a MoE.
double ffn_columns_per_token(const ModelConfig& m) {
  return m.moe() ? m.top_k * ffn_columns(m) : ffn_columns(m);
}
// FFN columns whose weights a layer stores: every expert's of a MoE.
double ffn_columns_stored(const ModelConfig& m) {
  return m.moe() ? m.experts * ffn_columns(m) : ffn_columns(m);
}
// The units TP deals out: whole experts (expert parallelism), else blocks of ffn_unit_columns
// (of one expert when the experts' columns are split: every expert is split alike).
std::int64_t ffn_units(const ModelConfig& m) {
  if (m.moe() && m.experts_whole) return m.experts;
  return std::max<std::int64_t>(1, std::llround(ffn_columns(m) / m.ffn_unit_columns));
}

}  // namespace

Workload::Workload(const SimConfig& config) : c_(config) {
  const auto& m = c_.model;
  const auto& p = c_.parallel;
  stage_layers_ = std::ceil(static_cast<double>(m.layers) / p.pp);
  tokens_per_replica_ = m.global_batch_tokens / static_cast<double>(c_.replicas());
  microbatches_ = std::max(
      1.0, tokens_per_replica_ / (static_cast<double>(m.sequence) * p.microbatch_sequences));
  const double h = m.hidden;
  stage_params_ = stage_layers_ * (4.0 * h * h + 2.0 * h * ffn_columns_stored(m));

  speed_.assign(p.tp + 1, 0.0);
  dp_factor_.assign(p.tp + 1, 0.0);
  const double full = compute_s(p.tp) + tp_comm_s(p.tp);
  const double healthy_step = step(p.tp, p.tp).total_s;
  for (int t = 1; t <= p.tp; ++t) {
    speed_[t] = full / (compute_s(t) + tp_comm_s(t));
    dp_factor_[t] = healthy_step / step(p.tp, t).total_s;
  }
}

int Workload::degree_after_failures(int failed) const {
  const auto& p = c_.parallel;
  const int healthy = std::max(0, p.tp - failed);
  const int degree = healthy / p.degree_multiple * p.degree_multiple;
  return degree >= p.min_degree ? degree : 0;
}

double Workload::compute_s(int degree) const {
  const auto& m = c_.model;
  const double h = m.hidden, s = m.sequence;
  const double f_head = 8 * h * h + 2 * s * h;
  const double f_ffn = 4 * h * ffn_columns_per_token(m);
  const double head_share = static_cast<double>(shard::max_units_per_rank(m.heads, degree)) /
                            static_cast<double>(m.heads);
  const std::int64_t units = ffn_units(m);
  const double ffn_share =
      static_cast<double>(shard::max_units_per_rank(units, degree)) / static_cast<double>(units);
  const double flops =
      tokens_per_replica_ * stage_layers_ * 3.0 * (f_head * head_share + f_ffn * ffn_share);
  return flops / (c_.system.peak_tflops * 1e12 * c_.system.efficiency);
}

double Workload::rebalanced_speed(int degree, const std::vector<double>& slow) const {
  NTP_CHECK(degree >= 1 && static_cast<int>(slow.size()) <= degree);
  if (slow.empty()) return 1.0;
  const auto& m = c_.model;
  const double h = m.hidden, s = m.sequence;
  const std::int64_t units = ffn_units(m);
  // Cost per unit: a head's and an FFN unit's share of a layer's FLOPs.
  const std::vector<UnitSpaceCost> spaces = {
      {m.heads, (8 * h * h + 2 * s * h) / m.heads},
      {units, 4 * h * ffn_columns_per_token(m) / static_cast<double>(units)}};
  const int fast = degree - static_cast<int>(slow.size());
  return weighted_split_time(spaces, degree, {}) / weighted_split_time(spaces, fast, slow);
}

double Workload::tp_comm_s(int degree) const {
  if (degree <= 1) return 0.0;
  const double t = degree;
  // Per token and layer, bf16 (2 bytes per element): attention's all-reduce forward and backward
  // (ring: 2 (t - 1) / t of h elements each), and the FFN's the same, or for a MoE the all-to-all
  // of expert parallelism (whole experts): each token's h elements to its top_k experts and back
  // (dispatch and combine), forward and backward, the (t - 1) / t of them on another GPU.
  const double h = c_.model.hidden;
  const bool all_to_all = c_.model.moe() && c_.model.experts_whole;
  const double ffn_elements =
      all_to_all ? 4.0 * c_.model.top_k * h * (t - 1) / t : 2.0 * h * 2.0 * (t - 1) / t;
  const double bytes =
      tokens_per_replica_ * stage_layers_ * 2.0 * (2.0 * h * 2.0 * (t - 1) / t + ffn_elements);
  return (1.0 - c_.parallel.tp_overlap) * bytes / (c_.system.scale_up_gbytes_per_s * 1e9);
}

double Workload::dp_s(int t_min) const {
  const double dp = static_cast<double>(c_.replicas());
  const double shard_bytes = stage_params_ * 2.0 / t_min;
  const double ring = dp > 1 ? 2.0 * (dp - 1) / dp * shard_bytes : 0.0;
  double seconds = ring / (c_.system.scale_out_gbits_per_s * 1e9 / 8.0);
  if (t_min < c_.parallel.tp) {
    // Fold before and unfold after the reduction: a core rank receives the shards of
    // ceil((tp - t_min) / t_min) extra ranks over the scale-up link.
    const double extra_per_core = std::ceil(static_cast<double>(c_.parallel.tp - t_min) / t_min);
    seconds += 2.0 * extra_per_core * stage_params_ * 2.0 / c_.parallel.tp /
               (c_.system.scale_up_gbytes_per_s * 1e9);
  }
  return seconds;
}

StepBreakdown Workload::step(int degree, int t_min) const {
  StepBreakdown b;
  b.compute_s = compute_s(degree);
  b.tp_comm_s = tp_comm_s(degree);
  b.bubble_s = (b.compute_s + b.tp_comm_s) * (c_.parallel.pp - 1) / microbatches_;
  b.dp_s = dp_s(t_min);
  const double window = c_.parallel.dp_overlap * (2.0 / 3.0) * compute_s(c_.parallel.tp);
  b.dp_exposed_s = std::max(0.0, b.dp_s - window);
  b.total_s = b.compute_s + b.tp_comm_s + b.bubble_s + b.dp_exposed_s;
  return b;
}

double Workload::memory_bytes(int degree) const {
  const auto& p = c_.parallel;
  const double params = stage_params_ / degree;
  const double optimizer =
      12.0 * params / (p.distributed_optimizer ? static_cast<double>(c_.replicas()) : 1.0);
  const double inflight = std::min<double>(p.pp, microbatches_);
  const double activations = stage_layers_ * inflight * c_.model.sequence * p.microbatch_sequences *
                             c_.model.hidden * c_.model.activation_bytes_per_elem / degree;
  return params * 4.0 + optimizer + activations;
}

double Workload::tokens_per_second_healthy() const {
  return c_.model.global_batch_tokens / step(c_.parallel.tp, c_.parallel.tp).total_s;
}

namespace {

Status validate_moe(const SimConfig& c) {
  const ModelConfig& m = c.model;
  if (!m.moe()) return ok_status();
  if (!(m.expert_ffn_multiplier > 0)) {
    return invalid_argument("model.experts = " + std::to_string(m.experts) +
                            " needs model.expert_ffn_multiplier > 0 (one expert's width / hidden)");
  }
  if (m.top_k > m.experts) {
    return invalid_argument("model.top_k = " + std::to_string(m.top_k) +
                            " exceeds model.experts = " + std::to_string(m.experts));
  }
  if (m.experts_whole && m.experts < c.parallel.tp) {
    return invalid_argument("model.experts = " + std::to_string(m.experts) +
                            " is fewer than parallel.tp = " + std::to_string(c.parallel.tp) +
                            " with whole experts: every GPU of a TP group holds one at least; "
                            "raise model.experts or use model.expert_split = \"columns\"");
  }
  return ok_status();
}

}  // namespace

Status validate(const SimConfig& c) {
  const auto& p = c.parallel;
  if (p.domain_size % p.tp != 0) {
    return invalid_argument("parallel.domain_size = " + std::to_string(p.domain_size) +
                            " is not divisible by parallel.tp = " + std::to_string(p.tp) +
                            "; a domain must hold whole TP groups");
  }
  if (p.min_degree > p.tp) {
    return invalid_argument("parallel.min_degree = " + std::to_string(p.min_degree) +
                            " exceeds parallel.tp = " + std::to_string(p.tp));
  }
  if (p.degree_multiple > p.tp) {
    return invalid_argument("parallel.degree_multiple = " + std::to_string(p.degree_multiple) +
                            " exceeds parallel.tp = " + std::to_string(p.tp));
  }
  if (c.system.gpus % p.domain_size != 0) {
    return invalid_argument(
        "system.gpus = " + std::to_string(c.system.gpus) +
        " is not a multiple of parallel.domain_size = " + std::to_string(p.domain_size));
  }
  const std::int64_t groups = c.system.gpus / p.tp;
  if (groups % p.pp != 0) {
    return invalid_argument("system.gpus = " + std::to_string(c.system.gpus) + " gives " +
                            std::to_string(groups) +
                            " TP groups, not divisible by parallel.pp = " + std::to_string(p.pp));
  }
  NTP_RETURN_IF_ERROR(validate_moe(c));
  const auto& f = c.failures;
  if (f.blast_sizes.empty() || f.blast_sizes.size() != f.blast_weights.size()) {
    return invalid_argument(
        "failures.blast_sizes and failures.blast_weights must be non-empty and of equal length");
  }
  double total_weight = 0;
  for (std::size_t i = 0; i < f.blast_sizes.size(); ++i) {
    const int b = f.blast_sizes[i];
    if (b < 1 || p.domain_size % b != 0) {
      return invalid_argument(
          "failures.blast_sizes entry " + std::to_string(b) +
          " must be >= 1 and divide parallel.domain_size = " + std::to_string(p.domain_size));
    }
    if (!(f.blast_weights[i] >= 0)) {
      return invalid_argument("failures.blast_weights entry " + config_number(f.blast_weights[i]) +
                              " is negative; weights must be >= 0");
    }
    total_weight += f.blast_weights[i];
  }
  if (total_weight <= 0) {
    return invalid_argument("failures.blast_weights sum to 0; give at least one positive weight");
  }
  NTP_RETURN_IF_ERROR(validate_fail_slow(c.fail_slow));
  const double replicas = static_cast<double>(groups / p.pp);
  const double min_tokens =
      replicas * c.model.sequence * static_cast<double>(p.microbatch_sequences);
  if (c.model.global_batch_tokens < min_tokens) {
    return invalid_argument(
        "model.global_batch_tokens = " + config_number(c.model.global_batch_tokens) +
        " is less than one microbatch per replica (" + config_number(min_tokens) +
        " tokens); raise it or lower parallel.microbatch_sequences");
  }
  const Workload w(c);
  const double need = w.memory_bytes(p.min_degree);
  const double have = c.system.hbm_gb * 1e9;
  if (need > have) {
    return invalid_argument("the model does not fit in memory at parallel.min_degree = " +
                            std::to_string(p.min_degree) + ": it needs " +
                            config_number(std::round(need / 1e8) / 10) +
                            " GB per GPU and system.hbm_gb = " + config_number(c.system.hbm_gb) +
                            "; raise parallel.min_degree, parallel.pp or system.hbm_gb");
  }
  const bool live = std::any_of(c.run.policies.begin(), c.run.policies.end(),
                                [](const PolicySpec& s) { return recovers_live(s.kind); });
  if (live && c.recovery.live_recovery_seconds < 0) {
    NTP_RETURN_IF_ERROR(stage_unit_spaces(c).status());
  }
  return ok_status();
}

}  // namespace ntp::sim
