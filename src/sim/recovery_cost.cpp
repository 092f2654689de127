#include "sim/recovery_cost.h"

#include <algorithm>
#include <cmath>

#include "shard/balance.h"
#include "shard/cluster_layout.h"
#include "shard/fold_sync_strategy.h"
#include "shard/reshard_plan.h"
#include "sim/workload.h"

namespace ntp::sim {

namespace {

// Per-GPU traffic of a reshard, by link.
struct SlotTraffic {
  std::int64_t intra_in = 0, intra_out = 0, peer_in = 0, peer_out = 0;
};

// The spec of `degrees` (one domain each): failed slots are the highest indexes of a domain.
shard::ClusterSpec spec_of(const std::vector<int>& degrees, int domain_size,
                           const std::vector<shard::UnitSpace>& spaces, std::int64_t state_bytes) {
  shard::ClusterSpec spec;
  spec.domains = static_cast<int>(degrees.size());
  spec.domain_size = domain_size;
  spec.min_tp = 1;
  spec.spaces = spaces;
  spec.bytes.state_bytes = state_bytes;
  for (int d = 0; d < spec.domains; ++d) {
    for (int l = degrees[static_cast<std::size_t>(d)]; l < domain_size; ++l) {
      spec.failed.push_back({d, l});
    }
  }
  return spec;
}

}  // namespace

Result<std::vector<shard::UnitSpace>> stage_unit_spaces(const SimConfig& c) {
  const ModelConfig& m = c.model;
  if (m.hidden % m.heads != 0) {
    return invalid_argument("model.hidden = " + std::to_string(m.hidden) +
                            " is not a multiple of model.heads = " + std::to_string(m.heads) +
                            ": the reshard counts whole heads; pick hidden = heads x head size");
  }
  // A MoE's experts split by columns reshard as a dense FFN of all their columns would.
  const double columns = m.moe() ? m.expert_ffn_multiplier * m.hidden *
                                       (m.experts_whole ? 1.0 : static_cast<double>(m.experts))
                                 : m.ffn_multiplier * m.hidden;
  const std::int64_t ffn_units =
      std::max<std::int64_t>(1, std::llround(columns / static_cast<double>(m.ffn_unit_columns)));
  shard::ModelShape shape;
  shape.heads = m.heads;
  shape.hidden = m.hidden;
  shape.ffn_block = m.ffn_unit_columns;
  shape.ffn = ffn_units * m.ffn_unit_columns;
  shape.vocab = c.parallel.pp == 1 ? m.vocab : 0;
  shape.layers = (m.layers + c.parallel.pp - 1) / c.parallel.pp;
  if (m.moe() && m.experts_whole) {
    // Whole experts are a unit space of their own, which the layout algebra has in its MoE
    // (grouped-query) shape: planned here with one KV head per query head, and an LM head of one
    // row per GPU when the stage holds no vocabulary (bytes < 1e-5 of a stage's at these sizes).
    shape.experts = m.experts;
    shape.kv_heads = m.heads;
    if (shape.vocab == 0) shape.vocab = c.parallel.tp;
  }
  NTP_RETURN_IF_ERROR(shard::validate_model_shape(shape));
  std::vector<shard::UnitSpace> spaces = shard::model_unit_spaces(shape);
  for (const shard::UnitSpace& s : spaces) {
    if (!s.derived() && s.units < c.parallel.tp) {
      return invalid_argument("the model's " + s.name + " space has " + std::to_string(s.units) +
                              " units, fewer than parallel.tp = " + std::to_string(c.parallel.tp) +
                              ": every rank needs a unit; raise model.heads / lower "
                              "model.ffn_unit_columns or parallel.tp");
    }
  }
  return spaces;
}

RecoveryCost& RecoveryCost::operator+=(const RecoveryCost& o) {
  lost_step_s += o.lost_step_s;
  detect_s += o.detect_s;
  agree_s += o.agree_s;
  rebuild_s += o.rebuild_s;
  reshard_s += o.reshard_s;
  total_s += o.total_s;
  busiest_gpu_bytes += o.busiest_gpu_bytes;
  changed_group_bytes += o.changed_group_bytes;
  dp_peer_bytes += o.dp_peer_bytes;
  return *this;
}

Result<RecoveryCostModel> RecoveryCostModel::create(const SimConfig& c) {
  RecoveryCostModel m;
  NTP_ASSIGN_OR_RETURN(m.spaces_, stage_unit_spaces(c));
  m.r_ = c.recovery;
  ControlPlaneInfo& info = m.control_plane_;
  info.gpus = c.system.gpus;
  if (c.recovery.curve) {
    const ControlPlaneCurve& curve = *c.recovery.curve;
    info.model = "curve";
    info.curve = curve.source();
    info.curve_commit = curve.commit();
    info.domain = curve.domain();
    info.lo_gpus = curve.points().front().gpus;
    info.hi_gpus = curve.points().back().gpus;
    info.extrapolated = !curve.covers(static_cast<double>(c.system.gpus));
    m.kill_ = curve.at(static_cast<double>(c.system.gpus), false);
    m.hang_ = curve.at(static_cast<double>(c.system.gpus), true);
  } else {
    info.model = "ops-model";
    info.note = c.recovery.control_plane_note;
  }
  m.tp_ = c.parallel.tp;
  m.pp_ = c.parallel.pp;
  m.members_ = static_cast<double>(c.system.gpus);
  m.step_s_ = Workload(c).step(c.parallel.tp, c.parallel.tp).total_s;
  const double up_gbytes = c.recovery.reshard_gbytes_per_s > 0 ? c.recovery.reshard_gbytes_per_s
                                                               : c.system.scale_up_gbytes_per_s / 2;
  m.up_bps_ = up_gbytes * 1e9;
  m.out_bps_ = c.system.scale_out_gbits_per_s * 1e9 / 8.0;
  return m;
}

RecoveryCostModel::RecoveryCostModel(const RecoveryCostModel& o)
    : r_(o.r_),
      control_plane_(o.control_plane_),
      kill_(o.kill_),
      hang_(o.hang_),
      tp_(o.tp_),
      pp_(o.pp_),
      members_(o.members_),
      step_s_(o.step_s_),
      up_bps_(o.up_bps_),
      out_bps_(o.out_bps_),
      spaces_(o.spaces_) {
  std::lock_guard<std::mutex> lock(o.mutex_);
  cache_ = o.cache_;
}

RecoveryCostModel& RecoveryCostModel::operator=(const RecoveryCostModel& o) {
  if (this == &o) return *this;
  RecoveryCostModel copy(o);
  std::lock_guard<std::mutex> lock(mutex_);
  r_ = copy.r_;
  control_plane_ = std::move(copy.control_plane_);
  kill_ = copy.kill_;
  hang_ = copy.hang_;
  tp_ = copy.tp_;
  pp_ = copy.pp_;
  members_ = copy.members_;
  step_s_ = copy.step_s_;
  up_bps_ = copy.up_bps_;
  out_bps_ = copy.out_bps_;
  spaces_ = std::move(copy.spaces_);
  cache_ = std::move(copy.cache_);
  return *this;
}

Result<ReshardEstimate> RecoveryCostModel::plan(const std::vector<int>& from_degrees,
                                                const std::vector<int>& to_degrees,
                                                std::int64_t* into_first_slot) const {
  if (from_degrees.size() != to_degrees.size() || from_degrees.empty()) {
    return invalid_argument("a reshard needs the same number of domains before and after");
  }
  for (std::size_t d = 0; d < from_degrees.size(); ++d) {
    for (int t : {from_degrees[d], to_degrees[d]}) {
      if (t < 1 || t > tp_) {
        return invalid_argument("domain " + std::to_string(d) + " has TP degree " +
                                std::to_string(t) + "; degrees must be in 1.." +
                                std::to_string(tp_) + " (parallel.tp)");
      }
    }
  }
  const shard::FoldSyncStrategy fold;
  const std::int64_t state_bytes = r_.state_bytes_per_param;
  const std::vector<int> full(from_degrees.size(), tp_);
  shard::ClusterSpec full_spec = spec_of(full, tp_, spaces_, state_bytes);
  shard::ClusterSpec from_spec = spec_of(from_degrees, tp_, spaces_, state_bytes);
  shard::ClusterSpec to_spec = spec_of(to_degrees, tp_, spaces_, state_bytes);
  NTP_RETURN_IF_ERROR(shard::validate_cluster_spec(full_spec));
  NTP_RETURN_IF_ERROR(shard::validate_cluster_spec(from_spec));
  NTP_RETURN_IF_ERROR(shard::validate_cluster_spec(to_spec));
  // History: a healthy job that reached `from` in one reconfiguration, then `to`.
  NTP_ASSIGN_OR_RETURN(shard::ClusterLayout base, shard::plan_cluster(full_spec, fold));
  NTP_ASSIGN_OR_RETURN(shard::ClusterLayout from, shard::plan_cluster(from_spec, fold, &base));
  NTP_ASSIGN_OR_RETURN(shard::ClusterLayout to, shard::plan_cluster(to_spec, fold, &from));
  NTP_ASSIGN_OR_RETURN(shard::ReshardPlan rp, shard::plan_reshard(from, to));

  std::vector<SlotTraffic> traffic(from_degrees.size() * static_cast<std::size_t>(tp_));
  auto at = [&](shard::SlotRef s) -> SlotTraffic& {
    return traffic[static_cast<std::size_t>(s.domain) * static_cast<std::size_t>(tp_) +
                   static_cast<std::size_t>(s.slot)];
  };
  ReshardEstimate e;
  if (into_first_slot != nullptr) *into_first_slot = 0;
  for (const shard::ShardTransfer& t : rp.transfers) {
    if (t.intra_domain()) {
      at(t.destination).intra_in += t.bytes;
      at(t.source).intra_out += t.bytes;
    } else {
      at(t.destination).peer_in += t.bytes;
      at(t.source).peer_out += t.bytes;
    }
    if (t.destination.domain == 0) {
      e.changed_group_bytes += t.bytes;
      if (!t.intra_domain()) e.dp_peer_bytes += t.bytes;
    }
    if (into_first_slot != nullptr && t.destination == shard::SlotRef{0, 0}) {
      *into_first_slot += t.bytes;
    }
  }
  for (const SlotTraffic& s : traffic) {
    const std::int64_t intra = std::max(s.intra_in, s.intra_out);
    const std::int64_t peer = std::max(s.peer_in, s.peer_out);
    const double seconds =
        static_cast<double>(intra) / up_bps_ + static_cast<double>(peer) / out_bps_;
    if (seconds > e.seconds) {
      e.seconds = seconds;
      e.busiest_gpu_bytes = intra + peer;
    }
  }
  return e;
}

ReshardEstimate RecoveryCostModel::full_fetch(int degree) const {
  ReshardEstimate e;
  for (const shard::UnitSpace& s : spaces_) {
    const std::int64_t unit_bytes = s.params_per_unit * r_.state_bytes_per_param;
    e.busiest_gpu_bytes += shard::max_units_per_rank(s.units, degree) * unit_bytes;
    e.changed_group_bytes += s.units * unit_bytes;
  }
  e.dp_peer_bytes = e.changed_group_bytes;
  e.seconds = static_cast<double>(e.busiest_gpu_bytes) / out_bps_;
  return e;
}

Result<ReshardEstimate> RecoveryCostModel::cluster_reshard(const std::vector<int>& from_degrees,
                                                           const std::vector<int>& to_degrees,
                                                           std::int64_t* into_first_slot) const {
  return plan(from_degrees, to_degrees, into_first_slot);
}

ReshardEstimate RecoveryCostModel::group_reshard(int from, int to, int others_min) const {
  const auto key = std::make_tuple(from, to, others_min);
  {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = cache_.find(key);
    if (it != cache_.end()) return it->second;
  }
  // The representative cluster: the changed group, a group at the others' lowest degree (when
  // below tp) and a healthy one.
  std::vector<int> others;
  if (others_min >= 1 && others_min < tp_) others.push_back(others_min);
  others.push_back(tp_);
  auto cluster = [&](int first) {
    std::vector<int> d{first};
    d.insert(d.end(), others.begin(), others.end());
    return d;
  };
  ReshardEstimate e;
  if (from == to) {
    // The same degree on a different set of GPUs: the GPU that takes over fetches the lost
    // rank's units from DP peers; nothing else moves.
    if (from > 0) {
      e = full_fetch(from);
      e.changed_group_bytes = e.busiest_gpu_bytes;
      e.dp_peer_bytes = e.busiest_gpu_bytes;
    }
  } else if (from == 0 || to == 0) {
    // A group that comes back fetches its whole state from DP peers; one that stops moves nothing
    // (the others keep their layouts until the next event).
    if (from == 0) e = full_fetch(to);
  } else {
    Result<ReshardEstimate> r = plan(cluster(from), cluster(to), nullptr);
    NTP_CHECK_MSG(r.ok(), r.status().to_string());
    e = *r;
  }
  std::lock_guard<std::mutex> lock(mutex_);
  cache_.emplace(key, e);
  return e;
}

RecoveryCost RecoveryCostModel::event(bool failure, const std::vector<DegreeChange>& changes,
                                      int others_min) const {
  RecoveryCost c;
  bool any = false;
  ReshardEstimate worst;
  for (const DegreeChange& ch : changes) {
    // A repair that changes no degree, or a failure inside a group that is not running, leaves
    // the running job as it is.
    if (ch.from == ch.to && (!failure || ch.from == 0)) continue;
    any = true;
    const ReshardEstimate e = group_reshard(ch.from, ch.to, others_min);
    if (e.seconds >= worst.seconds) {
      worst.seconds = e.seconds;
      worst.busiest_gpu_bytes = e.busiest_gpu_bytes;
    }
    worst.changed_group_bytes += e.changed_group_bytes;
    worst.dp_peer_bytes += e.dp_peer_bytes;
  }
  if (!any) return c;
  return price(failure, worst, step_s_);
}

RecoveryCost RecoveryCostModel::price(bool failure, const ReshardEstimate& worst,
                                      double step_s) const {
  RecoveryCost c;
  const RecoveryConfig& r = r_;
  if (r.curve) {
    const double h = r.hang_fraction;
    if (failure) {
      c.lost_step_s = step_s / 2.0;
      const double hang_detect =
          std::max(0.0, r.detect_hang_seconds + hang_.detect_s - r.curve->hang_detect_s());
      c.detect_s = (1.0 - h) * std::max(r.detect_kill_seconds, kill_.detect_s) + h * hang_detect;
      c.agree_s = (1.0 - h) * kill_.agree_s + h * hang_.agree_s;
      c.rebuild_s = (1.0 - h) * kill_.rebuild_s + h * hang_.rebuild_s;
    } else {
      c.agree_s = kill_.agree_s;
      c.rebuild_s = kill_.rebuild_s;
    }
  } else {
    price_ops_model(failure, c);
    if (failure) c.lost_step_s = step_s / 2.0;
  }
  c.reshard_s = worst.seconds;
  c.busiest_gpu_bytes = worst.busiest_gpu_bytes;
  c.changed_group_bytes = worst.changed_group_bytes;
  c.dp_peer_bytes = worst.dp_peer_bytes;
  c.total_s = c.lost_step_s + c.detect_s + c.agree_s + c.rebuild_s + c.reshard_s;
  return c;
}

void RecoveryCostModel::price_ops_model(bool failure, RecoveryCost& c) const {
  const RecoveryConfig& r = r_;
  const double notice_s = r.notice_store_ops_per_member * members_ / r.store_ops_per_s;
  if (failure) {
    c.detect_s = (1.0 - r.hang_fraction) * std::max(r.detect_kill_seconds, notice_s) +
                 r.hang_fraction * std::max(r.detect_hang_seconds, notice_s);
    // The decider's wait for a stale heartbeat starts at the failure, like detection.
    c.agree_s =
        (1.0 - r.hang_fraction) * std::max(0.0, r.heartbeat_stale_seconds - r.detect_kill_seconds) +
        r.hang_fraction * std::max(0.0, r.heartbeat_stale_seconds - r.detect_hang_seconds);
  }
  c.agree_s += std::max(r.agree_round_trips * r.store_rtt_seconds,
                        r.agree_store_ops_per_member * members_ / r.store_ops_per_s);
  c.rebuild_s = std::max(r.formation_seconds,
                         r.formation_store_ops_per_member * members_ / r.store_ops_per_s);
}

}  // namespace ntp::sim
