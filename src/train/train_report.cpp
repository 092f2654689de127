#include "train/train_report.h"

#include <algorithm>
#include <chrono>
#include <filesystem>

#include <nlohmann/json.hpp>

#include "core/wall_clock.h"
#include "kernels/cpu/blas_select.h"
#include "kernels/cpu/gemm_bf16.h"
#include "kernels/cpu/matmul.h"
#include "model/model_config.h"
#include "shard/load_layout.h"
#include "train/worker_role.h"

namespace ntp::train {
namespace {

std::string join(const std::vector<int>& v) {
  std::string out;
  for (int x : v) out += (out.empty() ? "" : ",") + std::to_string(x);
  return out;
}

}  // namespace

TrainReport::TrainReport(const TrainConfig& config, const shard::ClusterLayout& layout,
                         const std::vector<ReplicaBatch>& batches, std::FILE* out)
    : quiet_(config.quiet), steps_(config.steps), metrics_path_(config.metrics_file), out_(out) {
  set_layout(layout, batches);
}

void TrainReport::set_layout(const shard::ClusterLayout& layout,
                             const std::vector<ReplicaBatch>& batches) {
  degrees_.clear(), samples_.clear(), replica_of_.clear(), balance_.clear();
  for (const shard::ReplicaLayout& r : layout.replicas) degrees_.push_back(r.degree());
  for (const ReplicaBatch& b : batches) samples_.push_back(b.samples);
  for (const shard::SlotRef& s : active_slots(layout)) replica_of_.push_back(s.domain);
  for (const shard::ReplicaLayout& r : layout.replicas) {
    double worst = 1.0;
    for (size_t sp = 0; sp < r.units.size(); ++sp) {
      worst = std::min(worst, 1.0 / r.imbalance(static_cast<int>(sp)));
    }
    balance_.push_back(worst);
  }
}

Result<TrainReport> TrainReport::open(const TrainConfig& c, const shard::ClusterLayout& layout,
                                      const std::vector<ReplicaBatch>& batches, std::FILE* out,
                                      bool append) {
  std::error_code ec;
  std::filesystem::create_directories(c.out_dir, ec);
  const std::filesystem::path metrics_dir = std::filesystem::path(c.metrics_file).parent_path();
  if (!metrics_dir.empty()) std::filesystem::create_directories(metrics_dir, ec);
  TrainReport report(c, layout, batches, out);
  // A resumed run (or a restarted job) continues the metrics file of the run it continues.
  report.metrics_.open(c.metrics_file, append ? std::ios::app : std::ios::trunc);
  if (!report.metrics_) {
    return invalid_argument("--metrics " + c.metrics_file + ": cannot be written (" + ec.message() +
                            "); choose a writable --out folder");
  }
  std::vector<int> micro;
  std::vector<int> samples;
  for (const ReplicaBatch& b : batches) {
    micro.push_back(static_cast<int>(b.micro_batches));
    samples.push_back(static_cast<int>(b.samples));
  }
  const int workers = static_cast<int>(report.replica_of_.size());
  std::fprintf(out,
               "ntp train: %d replicas at TP %s on %d workers (%d slots failed), strategy %s, "
               "optimizer %s\n",
               c.domains, join(report.degrees_).c_str(), workers, static_cast<int>(c.failed.size()),
               c.strategy.c_str(), optimizer_sharding_name(c.optimizer));
  std::fprintf(out,
               "  model: %lld layers, %lld heads, width %lld, FFN %lld (units of %lld), context "
               "%lld, vocabulary %lld: %lld parameters\n",
               static_cast<long long>(c.model.n_layer), static_cast<long long>(c.model.n_head),
               static_cast<long long>(c.model.n_embd), static_cast<long long>(c.model.ffn()),
               static_cast<long long>(c.model.ffn_unit), static_cast<long long>(c.model.n_ctx),
               static_cast<long long>(c.model.vocab_size),
               static_cast<long long>(c.model.num_params()));
  std::fprintf(out,
               "  batch: %lld sequences of %lld tokens per step, policy %s: samples per replica "
               "%s, micro-batch %lld (accumulation %s)\n",
               static_cast<long long>(c.global_batch()), static_cast<long long>(c.model.n_ctx),
               batch_policy_name(c.batch_policy), join(samples).c_str(),
               static_cast<long long>(c.micro_batch), join(micro).c_str());
  std::string dtype = kernels::cpu::matmul_dtype_name(c.dtype);
  if (c.dtype == kernels::cpu::MatmulDtype::kBf16) {
    dtype += std::string(" (") +
             kernels::cpu::bf16_gemm_path_name(kernels::cpu::default_bf16_gemm_path()) + ")";
  }
  std::fprintf(out, "  BLAS: %s; matmul inputs %s\n", kernels::cpu::blas_description().c_str(),
               dtype.c_str());
  std::fprintf(out, "  sync plan: %zu DP groups, %zu fold transfers; metrics: %s\n",
               layout.sync.groups.size(), layout.sync.folds.size(), c.metrics_file.c_str());
  std::fflush(out);
  nlohmann::json start = {{"type", "start"},
                          {"time", unix_seconds()},
                          {"degrees", report.degrees_},
                          {"samples", report.samples_},
                          {"strategy", c.strategy},
                          {"optimizer", optimizer_sharding_name(c.optimizer)},
                          {"batch_policy", batch_policy_name(c.batch_policy)},
                          {"dtype", kernels::cpu::matmul_dtype_name(c.dtype)},
                          {"expert_dispatch", model::expert_dispatch_name(c.expert_dispatch)},
                          {"global_batch", c.global_batch()},
                          {"seq_len", c.model.n_ctx},
                          {"params", c.model.num_params()},
                          {"balance", report.balance_},
                          {"steps", c.steps}};
  report.write(start.dump());
  return report;
}

void TrainReport::write(const std::string& json_line) {
  metrics_ << json_line << '\n';
  metrics_.flush();
}

void TrainReport::step(const StepFigures& f, const std::vector<double>& ranks) {
  committed_s_ += f.step_s;
  const size_t replicas = degrees_.size();
  std::vector<double> fwd_bwd(replicas, 0.0), wait(replicas, 0.0), opt(replicas, 0.0);
  std::vector<double> overlap(replicas, 1.0), bytes(replicas, 0.0), compute(replicas, 0.0);
  std::vector<double> routed(replicas, 0.0);
  for (size_t r = 0; r < replica_of_.size(); ++r) {
    const auto d = static_cast<size_t>(replica_of_[r]);
    const double* x = ranks.data() + kRankFigures * r;
    fwd_bwd[d] = std::max(fwd_bwd[d], x[0]);
    wait[d] = std::max(wait[d], x[1]);
    opt[d] = std::max(opt[d], x[2]);
    overlap[d] = std::min(overlap[d], x[3]);
    bytes[d] = std::max(bytes[d], x[4]);
    compute[d] = std::max(compute[d], x[kComputeFigure]);
    routed[d] = std::max(routed[d], x[kRoutedLoadFigure]);
  }
  nlohmann::json per_replica = nlohmann::json::array();
  for (size_t d = 0; d < replicas; ++d) {
    per_replica.push_back({{"domain", d},
                           {"degree", degrees_[d]},
                           {"samples", samples_[d]},
                           {"fwd_bwd_s", fwd_bwd[d]},
                           {"sync_wait_s", wait[d]},
                           {"optimizer_s", opt[d]},
                           {"sync_overlap", overlap[d]},
                           {"sync_bytes_max_rank", bytes[d]},
                           {"compute_s", compute[d]}});
    // A MoE model's routing: ntp drops no token, so this is the capacity factor that dropping
    // none would need (model::Model::routed_load_peak).
    if (routed[d] > 0.0) per_replica.back()["routed_load_peak"] = routed[d];
  }
  nlohmann::json line = {{"type", "step"},
                         {"time", unix_seconds()},
                         {"step", f.step},
                         {"loss", f.loss},
                         {"lr", f.lr},
                         {"grad_norm", f.grad_norm},
                         {"clip", f.clip},
                         {"step_s", f.step_s},
                         {"tokens_per_s", f.tokens_per_s},
                         {"replicas", per_replica}};
  write(line.dump());
  if (quiet_) return;
  std::fprintf(out_,
               "step %5lld/%lld | loss %.4f | lr %.2e | norm %.3f | %7.0f tok/s | TP %s | %.0f ms "
               "(fwd+bwd %.0f, sync wait %.0f, opt %.0f)\n",
               static_cast<long long>(f.step + 1), static_cast<long long>(steps_), f.loss,
               static_cast<double>(f.lr), f.grad_norm, f.tokens_per_s, join(degrees_).c_str(),
               f.step_s * 1e3, *std::max_element(fwd_bwd.begin(), fwd_bwd.end()) * 1e3,
               *std::max_element(wait.begin(), wait.end()) * 1e3,
               *std::max_element(opt.begin(), opt.end()) * 1e3);
  std::fflush(out_);
}

void TrainReport::eval(int64_t step, double loss) {
  write(nlohmann::json{{"type", "eval"}, {"step", step}, {"loss", loss}}.dump());
  std::fprintf(out_, "eval after step %lld: held-out loss %.4f\n", static_cast<long long>(step + 1),
               loss);
  std::fflush(out_);
}

void TrainReport::initialized(const std::string& dir) {
  write(nlohmann::json{{"type", "init"}, {"time", unix_seconds()}, {"dir", dir}}.dump());
  std::fprintf(out_, "initialized from %s: starting at step 1 with a fresh optimizer\n",
               dir.c_str());
  std::fflush(out_);
}

void TrainReport::resumed(int64_t step, const std::string& dir) {
  write(nlohmann::json{{"type", "resume"}, {"time", unix_seconds()}, {"step", step}, {"dir", dir}}
            .dump());
  std::fprintf(out_, "resumed from %s: continuing at step %lld\n", dir.c_str(),
               static_cast<long long>(step + 1));
  std::fflush(out_);
}

namespace {

// Where a layout placed the units of a space with measured loads (a MoE's experts): the loads,
// and per replica each rank's units and the busiest rank's load over the mean
// (shard::load_imbalance, at the slots' speeds). Null when no space has loads.
nlohmann::json loaded_placement(const shard::ClusterLayout& layout) {
  const shard::ClusterSpec& spec = layout.spec;
  for (size_t s = 0; s < spec.spaces.size(); ++s) {
    if (!spec.has_loads(static_cast<int>(s))) continue;
    nlohmann::json replicas = nlohmann::json::array();
    for (const shard::ReplicaLayout& r : layout.replicas) {
      if (r.slots.empty()) continue;
      nlohmann::json ranks = nlohmann::json::array();
      std::vector<double> speeds;
      for (size_t k = 0; k < r.slots.size(); ++k) {
        ranks.push_back(r.units[s][k].ids());
        speeds.push_back(spec.speed(r.domain, r.slots[k]));
      }
      replicas.push_back(
          {{"domain", r.domain},
           {"ranks", ranks},
           {"load_imbalance", shard::load_imbalance(r.units[s], spec.unit_loads[s], speeds)}});
    }
    return {{"space", spec.spaces[s].name}, {"loads", spec.unit_loads[s]}, {"replicas", replicas}};
  }
  return nullptr;
}

}  // namespace

void TrainReport::recovery(const RecoveryEvent& e, const shard::ClusterLayout& layout,
                           const std::vector<ReplicaBatch>& batches) {
  set_layout(layout, batches);
  ++reconfigurations_;
  lost_detect_s_ += e.detect_s;
  lost_reconfigure_s_ += e.total_s;
  std::string failed;  // the new layout's inactive slots, as --failed takes them
  for (const shard::SlotRef& f : layout.spec.failed) {
    failed += (failed.empty() ? "" : ",") + std::to_string(f.domain) + ":" + std::to_string(f.slot);
  }
  nlohmann::json line{{"type", "recovery"},
                      {"time", unix_seconds()},
                      {"failed", failed},
                      {"cause", e.cause},
                      {"epoch", e.epoch},
                      {"step", e.step},
                      {"rolled_back", e.rolled_back},
                      {"old_degrees", e.old_degrees},
                      {"degrees", e.degrees},
                      {"detect_s", e.detect_s},
                      {"agree_s", e.agree_s},
                      {"rebuild_s", e.rebuild_s},
                      {"reshard_s", e.reshard_s},
                      {"total_s", e.total_s},
                      {"reshard_bytes", e.reshard_bytes},
                      {"reshard_busiest_rank_bytes", e.reshard_busiest_rank_bytes},
                      {"state_from", e.state_from},
                      {"checkpoint_step", e.checkpoint_step},
                      {"steps_redone", e.steps_redone}};
  if (nlohmann::json placed = loaded_placement(layout); !placed.is_null()) {
    line["placement_by_load"] = std::move(placed);
  }
  write(line.dump());
  if (e.state_from == "checkpoint") {
    std::fprintf(out_,
                 "no live copy of some lost state (every holder of some units, or a ZeRO-1 "
                 "owner and its copy): the survivors reload the "
                 "checkpoint of step %lld (%lld committed steps to compute again)\n",
                 static_cast<long long>(e.checkpoint_step), static_cast<long long>(e.steps_redone));
  }
  std::fprintf(out_,
               "%s: TP %s -> %s in %.2f s (detected after %.2f s; agree %.2f, rebuild %.2f, "
               "reshard %.3f s, %lld bytes moved), continuing at step %lld%s\n",
               e.cause == "repair" ? "repaired slots admitted" : "device lost",
               join(e.old_degrees).c_str(), join(e.degrees).c_str(), e.total_s, e.detect_s,
               e.agree_s, e.rebuild_s, e.reshard_s, static_cast<long long>(e.reshard_bytes),
               static_cast<long long>(e.step + 1),
               e.rolled_back && e.state_from == "live" ? " (a half-applied step taken back)" : "");
  std::fflush(out_);
}

namespace {

// Every replica's units per space and rank: {"heads": [[...]], ...} as counts.
nlohmann::json unit_counts(const shard::ReplicaLayout& r, const shard::ClusterSpec& spec) {
  nlohmann::json out = nlohmann::json::object();
  for (size_t sp = 0; sp < spec.spaces.size(); ++sp) {
    std::vector<int64_t> counts;
    for (const shard::IntervalSet& units : r.units[sp]) counts.push_back(units.count());
    out[spec.spaces[sp].name] = counts;
  }
  return out;
}

}  // namespace

void TrainReport::rebalanced(const RecoveryEvent& e, const shard::ClusterLayout& before,
                             const shard::ClusterLayout& after,
                             const std::vector<ReplicaBatch>& batches, const RebalanceTarget& why) {
  set_layout(after, batches);
  ++reconfigurations_;
  lost_reconfigure_s_ += e.total_s;
  nlohmann::json replicas = nlohmann::json::array();
  std::string summary;
  for (size_t d = 0; d < after.replicas.size(); ++d) {
    const shard::ReplicaLayout& r = after.replicas[d];
    std::vector<double> speeds;
    for (int slot : r.slots) speeds.push_back(after.spec.speed(static_cast<int>(d), slot));
    replicas.push_back({{"domain", d},
                        {"slots", r.slots},
                        {"speeds", speeds},
                        {"units_before", unit_counts(before.replicas[d], before.spec)},
                        {"units_after", unit_counts(r, after.spec)}});
    if (after.spec.weighted(static_cast<int>(d)) || before.spec.weighted(static_cast<int>(d))) {
      char line[64];
      summary += summary.empty() ? "" : "; ";
      summary += "replica " + std::to_string(d) + " speeds";
      for (double sp : speeds) {
        std::snprintf(line, sizeof line, " %.2f", sp);
        summary += line;
      }
    }
  }
  write(nlohmann::json{{"type", "rebalanced"},
                       {"time", unix_seconds()},
                       {"epoch", e.epoch},
                       {"step", e.step},
                       {"weighted", !after.spec.speeds.empty()},
                       {"raw_speeds", why.raw_speeds},
                       {"saved_s", why.saved_s},
                       {"reform_cost_s", why.reform_cost_s},
                       {"replicas", replicas},
                       {"agree_s", e.agree_s},
                       {"rebuild_s", e.rebuild_s},
                       {"reshard_s", e.reshard_s},
                       {"total_s", e.total_s},
                       {"reshard_bytes", e.reshard_bytes}}
            .dump());
  std::fprintf(out_, "%s: %s in %.2f s (%lld bytes moved), continuing at step %lld\n",
               after.spec.speeds.empty() ? "equal shares again" : "rebalanced for speed",
               summary.empty() ? "all at full speed" : summary.c_str(), e.total_s,
               static_cast<long long>(e.reshard_bytes), static_cast<long long>(e.step + 1));
  std::fflush(out_);
}

void TrainReport::power(int domain, int degree, double speed, const power::BoostPlan& plan) {
  write(nlohmann::json{{"type", "power"},
                       {"domain", domain},
                       {"degree", degree},
                       {"speed", speed},
                       {"power_factor", plan.power_factor},
                       {"keeps_pace", plan.keeps_pace},
                       {"batch_share", plan.batch_share}}
            .dump());
  std::fprintf(out_, "power: replica %d at TP %d runs at %.2f of a healthy one -> %.2f x TDP%s\n",
               domain, degree, speed, plan.power_factor,
               plan.keeps_pace ? " (keeps pace)"
                               : " (not enough to keep pace: its batch share covers the rest)");
  std::fflush(out_);
}

void TrainReport::checkpoint(int64_t step, const std::string& dir, double blocked_s) {
  write(
      nlohmann::json{{"type", "checkpoint"}, {"step", step}, {"dir", dir}, {"blocked_s", blocked_s}}
          .dump());
  std::fprintf(out_, "checkpoint after step %lld committed: %s (training blocked %.1f ms)\n",
               static_cast<long long>(step), dir.c_str(), blocked_s * 1e3);
  std::fflush(out_);
}

void TrainReport::finish(int64_t steps, double loss, double eval_loss, double tokens_per_s,
                         double wall_s) {
  // Goodput as this leader saw it: time in committed steps, and per cause what was lost.
  const double lost_s = lost_detect_s_ + lost_reconfigure_s_;
  write(nlohmann::json{{"type", "summary"},
                       {"steps", steps},
                       {"loss", loss},
                       {"eval_loss", eval_loss},
                       {"tokens_per_s", tokens_per_s},
                       {"wall_s", wall_s},
                       {"committed_step_s", committed_s_},
                       {"lost_detection_s", lost_detect_s_},
                       {"lost_reconfiguration_s", lost_reconfigure_s_},
                       {"reconfigurations", reconfigurations_}}
            .dump());
  std::fprintf(out_,
               "done: %lld steps, final loss %.4f, held-out loss %.4f, %.0f tokens/s; metrics in "
               "%s\n",
               static_cast<long long>(steps), loss, eval_loss, tokens_per_s, metrics_path_.c_str());
  if (reconfigurations_ > 0) {
    std::fprintf(out_,
                 "goodput: %.1f s wall, %.1f s in committed steps; %d re-formations lost %.1f s "
                 "(detection and the failed steps %.1f s, agreement + rebuild + reshard %.1f s)\n",
                 wall_s, committed_s_, reconfigurations_, lost_s, lost_detect_s_,
                 lost_reconfigure_s_);
  }
  std::fflush(out_);
}

}  // namespace ntp::train
