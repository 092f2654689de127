#include "train/train_config.h"

#include <algorithm>
#include <cmath>

#include "core/named_values.h"
#include "data/byte_tokenizer.h"
#include "train/worker_role.h"

namespace ntp::train {

int64_t TrainConfig::global_batch() const {
  return batch > 0 ? batch : static_cast<int64_t>(domains) * grad_accum * micro_batch;
}

BatchGrain TrainConfig::batch_grain() const {
  return model.family == model::ModelFamily::kMoe ? BatchGrain::kMicroBatch : BatchGrain::kSample;
}

namespace {

constexpr NamedValue<OptimizerSharding> kOptimizerShardingNames[] = {
    {OptimizerSharding::kReplicated, "replicated"}, {OptimizerSharding::kSharded, "sharded"}};

}  // namespace

Result<OptimizerSharding> parse_optimizer_sharding(const std::string& text) {
  return parse_named(kOptimizerShardingNames, "--optimizer", text);
}

Result<kernels::cpu::MatmulDtype> parse_matmul_dtype(const std::string& text) {
  return parse_named(kernels::cpu::kMatmulDtypeNames, "--dtype", text);
}

constexpr NamedValue<ControlPlane> kControlPlaneNames[] = {{ControlPlane::kFlat, "flat"},
                                                           {ControlPlane::kHierarchy, "hierarchy"}};

Result<ControlPlane> parse_control_plane(const std::string& text) {
  return parse_named(kControlPlaneNames, "--control-plane", text);
}

const char* optimizer_sharding_name(OptimizerSharding sharding) {
  return name_of(kOptimizerShardingNames, sharding);
}

shard::ClusterSpec cluster_spec(const TrainConfig& config) {
  shard::ClusterSpec spec;
  spec.domains = config.domains;
  spec.domain_size = config.tp;
  spec.min_tp = config.min_tp;
  spec.failed = config.failed;
  shard::leave_domains_without_slots(spec);  // --failed naming a whole domain: it left the job
  spec.spaces = shard::model_unit_spaces(model_shape(config.model));
  return spec;
}

namespace {

// --control-plane hierarchy's first cut: kills and hangs of a job of whole domains; what it does
// not have yet is refused, or (rebalancing, on by default) turned off.
Status validate_hierarchy(TrainConfig& c) {
  if (c.control_plane != ControlPlane::kHierarchy) return ok_status();
  if (c.domains < 2 || c.tp < 2) {
    return invalid_argument(
        "--control-plane hierarchy needs at least 2 domains of at least 2 "
        "slots (got --domains " +
        std::to_string(c.domains) + " --tp " + std::to_string(c.tp) +
        "); use --control-plane flat");
  }
  if (c.min_tp > 1) {
    return invalid_argument("--control-plane hierarchy parks no replica yet: use --min-tp 1 (got " +
                            std::to_string(c.min_tp) + ") or --control-plane flat");
  }
  if (!c.live_recovery) {
    return invalid_argument(
        "--control-plane hierarchy is live recovery's: drop --no-live-recovery");
  }
  c.rebalance = false;  // re-forming without a fault goes through the flat protocol only, so far
  return ok_status();
}

}  // namespace

Status validate_train_config(TrainConfig& c) {
  auto at_least = [](const char* flag, int64_t value, int64_t min) -> Status {
    if (value >= min) return ok_status();
    return invalid_argument(std::string(flag) + " must be at least " + std::to_string(min) +
                            ", got " + std::to_string(value));
  };
  NTP_RETURN_IF_ERROR(at_least("--steps", c.steps, 1));
  NTP_RETURN_IF_ERROR(at_least("--micro-batch", c.micro_batch, 1));
  NTP_RETURN_IF_ERROR(at_least("--grad-accum", c.grad_accum, 1));
  NTP_RETURN_IF_ERROR(at_least("--batch", c.batch, 0));
  NTP_RETURN_IF_ERROR(at_least("--warmup", c.warmup, 0));
  NTP_RETURN_IF_ERROR(at_least("--eval-every", c.eval_every, 0));
  NTP_RETURN_IF_ERROR(at_least("--eval-samples", c.eval_samples, 1));
  NTP_RETURN_IF_ERROR(at_least("--vocab-multiple", c.vocab_multiple, 1));
  NTP_RETURN_IF_ERROR(at_least("--bucket-kb", c.bucket_bytes, 1));
  NTP_RETURN_IF_ERROR(at_least("--timeout-ms", c.comm_timeout_ms, 100));
  // Three missed beats at least, so that one late beat on a busy host is not a hang.
  NTP_RETURN_IF_ERROR(at_least("--hang-detect-ms", c.hang_detect_ms, 300));
  if (!(c.lr > 0.0f) || !(c.min_lr >= 0.0f) || c.min_lr > c.lr) {
    return invalid_argument("--lr " + std::to_string(c.lr) + " and --min-lr " +
                            std::to_string(c.min_lr) + " need 0 <= min-lr <= lr and lr > 0");
  }
  if (!(c.beta1 >= 0.0f && c.beta1 < 1.0f) || !(c.beta2 >= 0.0f && c.beta2 < 1.0f)) {
    return invalid_argument("--beta1 and --beta2 must be in [0, 1)");
  }
  if (!(c.weight_decay >= 0.0f)) return invalid_argument("--weight-decay must be >= 0");
  if (!(c.grad_clip >= 0.0)) return invalid_argument("--grad-clip must be >= 0 (0 = no clipping)");
  if (c.strategy != "fold" && c.strategy != "native") {
    return invalid_argument("--strategy '" + c.strategy + "' is unknown; use fold or native");
  }
  if (c.model.vocab_size < data::kByteVocabSize) {
    return invalid_argument("the vocabulary must hold the 256 byte tokens");
  }
  c.model.vocab_size =
      (c.model.vocab_size + c.vocab_multiple - 1) / c.vocab_multiple * c.vocab_multiple;
  if (Status s = c.model.validate(); !s.ok()) {
    return invalid_argument(
        "model: " + s.message() +
        " (see --model, --layers, --heads, --kv-heads, --width, --ffn, --ffn-unit, --context; "
        "--model moe: --experts, --top-k, --shared-experts, --router-aux-coef)");
  }
  if (c.expert_dispatch == model::ExpertDispatch::kAllToAll &&
      (c.model.family != model::ModelFamily::kMoe || c.model.n_shared_experts > 0)) {
    return invalid_argument(
        "--expert-dispatch alltoall needs --model moe without shared experts (got --model " +
        std::string(model::model_family_name(c.model.family)) + ", --shared-experts " +
        std::to_string(c.model.n_shared_experts) + "); use --expert-dispatch allreduce");
  }
  shard::ClusterSpec spec = cluster_spec(c);
  NTP_RETURN_IF_ERROR(shard::validate_cluster_spec(spec));
  c.failed = spec.failed;
  if (c.batch > 0 && c.grad_accum != 1) {
    return invalid_argument("give --batch or --grad-accum, not both (--batch " +
                            std::to_string(c.batch) + ", --grad-accum " +
                            std::to_string(c.grad_accum) + ")");
  }
  if (!(c.emulate_device_gflops >= 0.0 && c.emulate_device_gflops < 1e9)) {
    return invalid_argument("--emulate-device-gflops " + std::to_string(c.emulate_device_gflops) +
                            " must be >= 0 (0: off)");
  }
  if (c.drop_below != 0.0 && !(c.drop_below > 0.0 && c.drop_below < 1.0)) {
    return invalid_argument("--drop-below " + std::to_string(c.drop_below) +
                            " must be in (0, 1): the fraction of the job's median speed below "
                            "which a slowed rank is treated as failed; 0: never");
  }
  if (!std::isfinite(c.rebalance_cost_s)) {
    return invalid_argument("--rebalance-cost-s " + std::to_string(c.rebalance_cost_s) +
                            " must be a number of seconds (>= 0), or < 0 to measure it");
  }
  if (!(c.power_limit >= 1.0 && c.power_limit <= 2.0)) {
    return invalid_argument("--power-limit " + std::to_string(c.power_limit) +
                            " must be in [1, 2] (x TDP; 1: the control cannot raise power)");
  }
  // The initial split, at equal slot speeds (layouts balance units per degree alike).
  std::vector<double> paces;
  for (int d = 0; d < c.domains; ++d) {
    paces.push_back(static_cast<double>(spec.degree(d)) / static_cast<double>(c.tp));
  }
  NTP_RETURN_IF_ERROR(
      split_global_batch(c.batch_policy, paces, c.global_batch(), c.micro_batch, c.batch_grain())
          .status());
  NTP_RETURN_IF_ERROR(at_least("--save-every", c.save_every, 0));
  NTP_RETURN_IF_ERROR(at_least("--keep-last", c.keep_last, 0));
  NTP_RETURN_IF_ERROR(at_least("--stop-after", c.stop_after, 0));
  if (c.save_every > 0 && c.save_dir.empty()) {
    return invalid_argument("--save-every " + std::to_string(c.save_every) +
                            " needs --save-dir DIR");
  }
  if (c.resume == "auto" && c.save_dir.empty()) {
    return invalid_argument("--resume auto resumes from --save-dir, which is not given");
  }
  if (c.metrics_file.empty()) c.metrics_file = c.out_dir + "/metrics.jsonl";
  return validate_hierarchy(c);
}

}  // namespace ntp::train
