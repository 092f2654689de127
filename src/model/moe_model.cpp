#include "model/moe_model.h"

#include <algorithm>
#include <numeric>
#include <utility>

#include "model/unit_lists.h"

namespace ntp::model {

MoeModel::MoeModel(MoeModelConfig config, LlamaShard shard, std::vector<int64_t> experts,
                   TpGroup* group)
    : LlamaModel(config.decoder(), std::move(shard), group),
      moe_(config),
      experts_(std::move(experts)) {}

Result<MoeModel> MoeModel::create(const MoeModelConfig& config, LlamaShard shard,
                                  std::vector<int64_t> experts, uint64_t seed, TpGroup* group,
                                  bool initialize) {
  NTP_RETURN_IF_ERROR(config.validate());
  if (config.n_shared == 0 && !shard.ffn_units.empty()) {
    return invalid_argument(
        "the MoE model without shared experts has no dense FFN: its shard "
        "lists " +
        std::to_string(shard.ffn_units.size()) +
        " FFN units; hold experts instead (leave ffn_units empty)");
  }
  NTP_RETURN_IF_ERROR(check_unit_space("experts", config.n_experts, {&experts},
                                       /*require_all=*/false));
  MoeModel m(config, std::move(shard), std::move(experts), group);
  NTP_RETURN_IF_ERROR(build(m, seed, initialize));
  // The blocks read and accumulate into the stacked expert tensors (storage that stays in place
  // when the model moves).
  const MoeConfig bc = config.block();
  MoeHolding holding{
      m.experts_, std::find(m.experts_.begin(), m.experts_.end(), int64_t{0}) != m.experts_.end()};
  for (const LayerParams& lp : m.layers_) {
    auto view = [&m](int param, int64_t slab) {
      Param& p = m.params_[static_cast<size_t>(param)];
      const int64_t size = p.unit_inner;
      return MoeBlock::WeightView{p.value.data() + slab * size, p.grad.data() + slab * size};
    };
    std::vector<MoeBlock::WeightView> views{view(lp.ffn[0], 0)};
    for (size_t j = 0; j < m.experts_.size(); ++j) {
      for (int w : {1, 2, 3})
        views.push_back(view(lp.ffn[static_cast<size_t>(w)], static_cast<int64_t>(j)));
    }
    NTP_ASSIGN_OR_RETURN(MoeBlock block, MoeBlock::create_view(bc, holding, std::move(views)));
    m.blocks_.push_back(std::move(block));
  }
  m.aux_dprobs_.assign(static_cast<size_t>(config.n_experts), 0.0);
  m.stats_.resize(m.blocks_.size());
  return m;
}

std::vector<int> MoeModel::add_ffn_params(int64_t /*layer*/, const std::string& prefix) {
  const int64_t c = moe_.llama.n_embd, f = moe_.llama.ffn(), e = moe_.n_experts;
  const std::string p = prefix + "block_sparse_moe.";
  // [outer, units, inner] views (model/param.h): one unit = one expert's whole matrix.
  const Sharding w13{0, experts_, UnitSpaceId::kExperts, 1, f * c};
  const Sharding w2{0, experts_, UnitSpaceId::kExperts, 1, c * f};
  std::vector<int> ids = {add_param(p + "gate.weight", {e, c}, Sharding{}),
                          add_param(p + "experts.w1.weight", {e, f, c}, w13),
                          add_param(p + "experts.w2.weight", {e, c, f}, w2),
                          add_param(p + "experts.w3.weight", {e, f, c}, w13)};
  if (moe_.n_shared > 0) {  // gate_proj, up_proj, down_proj over the FFN units
    const std::vector<int> shared = add_dense_ffn_params(p + "shared_experts.");
    ids.insert(ids.end(), shared.begin(), shared.end());
  }
  return ids;
}

Status MoeModel::set_expert_dispatch(ExpertDispatch dispatch) {
  if (dispatch == ExpertDispatch::kAllToAll && moe_.n_shared > 0) {
    return invalid_argument(
        "--expert-dispatch alltoall does not take shared experts (--shared-experts " +
        std::to_string(moe_.n_shared) +
        "): their TP-sharded outputs need the all-reduce; use --expert-dispatch allreduce");
  }
  dispatch_ = dispatch;
  return ok_status();
}

Status MoeModel::ensure_exchanges() {
  if (!exchanges_.empty()) return ok_status();
  const int64_t ne = moe_.n_experts;
  TpGroup& g = group();
  std::vector<float> mine(static_cast<size_t>(ne), 0.0f);
  for (int64_t e : experts_) mine[static_cast<size_t>(e)] = 1.0f;
  std::vector<float> all(static_cast<size_t>(ne * g.size()));
  NTP_RETURN_IF_ERROR(g.all_gather(mine, all));
  std::vector<int> holders(static_cast<size_t>(ne), -1);
  for (int r = 0; r < g.size(); ++r) {
    for (int64_t e = 0; e < ne; ++e) {
      if (all[static_cast<size_t>(r * ne + e)] == 0.0f) continue;
      if (holders[static_cast<size_t>(e)] >= 0) {
        return internal_error("expert " + std::to_string(e) + " is held by ranks " +
                              std::to_string(holders[static_cast<size_t>(e)]) + " and " +
                              std::to_string(r) + " of the TP group; each must be held once");
      }
      holders[static_cast<size_t>(e)] = r;
    }
  }
  for (int64_t e = 0; e < ne; ++e) {
    if (holders[static_cast<size_t>(e)] < 0) {
      return internal_error("expert " + std::to_string(e) + " is held by no rank of the TP group");
    }
  }
  for (size_t l = 0; l < blocks_.size(); ++l) exchanges_.emplace_back(g, holders);
  return ok_status();
}

Status MoeModel::ffn_forward(size_t l, const Dims& m, std::vector<float>& x_out) {
  const LayerActs& a = acts_[l];
  y_.resize(static_cast<size_t>(m.n * m.c));
  MoeBlock& block = blocks_[l];
  block.set_matmul_dtype(matmul_dtype());  // the experts' products at the model's dtype
  RoutingStats& stats = stats_[l];
  if (dispatch_ == ExpertDispatch::kAllToAll) {
    NTP_RETURN_IF_ERROR(ensure_exchanges());
    NTP_RETURN_IF_ERROR(exchanges_[l].forward(block, a.h2, m.n, y_, stats));
  } else {
    NTP_RETURN_IF_ERROR(block.forward(a.h2, m.n, y_).status());
    if (moe_.n_shared > 0) {  // the shared experts' partial output, over this rank's FFN units
      const int* shared = layers_[l].ffn.data() + 4;
      dense_ffn_hidden(l, m, shared);
      dense_ffn_output(l, m, shared, y_.data());
    }
    NTP_RETURN_IF_ERROR(all_reduce(y_));  // the experts' partial outputs
    const int64_t ne = moe_.n_experts;
    stats.counts.assign(static_cast<size_t>(ne), 0.0);
    stats.prob_sum.assign(static_cast<size_t>(ne), 0.0);
    for (int64_t e = 0; e < ne; ++e) {
      stats.counts[static_cast<size_t>(e)] =
          static_cast<double>(block.expert_counts()[static_cast<size_t>(e)]);
      for (int64_t t = 0; t < m.n; ++t) {
        stats.prob_sum[static_cast<size_t>(e)] += block.probs()[static_cast<size_t>(t * ne + e)];
      }
    }
  }
  x_out.resize(y_.size());
  for (size_t i = 0; i < y_.size(); ++i) x_out[i] = a.x_mid[i] + y_[i];
  return ok_status();
}

double MoeModel::ffn_loss(const Dims& m) {
  // transformers' load_balancing_loss_func over all layers' router logits (see the top).
  const int64_t ne = moe_.n_experts;
  const double total = static_cast<double>(stats_.size()) * static_cast<double>(m.n);  // L n
  std::vector<double> count(static_cast<size_t>(ne), 0.0), prob(static_cast<size_t>(ne), 0.0);
  for (const RoutingStats& s : stats_) {
    for (size_t e = 0; e < count.size(); ++e) {
      count[e] += s.counts[e];
      prob[e] += s.prob_sum[e];
    }
  }
  aux_ = 0.0;
  for (size_t e = 0; e < count.size(); ++e) {
    aux_ += count[e] / total * (prob[e] / total);
    aux_dprobs_[e] =
        moe_.router_aux_loss_coef * static_cast<double>(ne) * count[e] / (total * total);
  }
  aux_ *= static_cast<double>(ne);
  return moe_.router_aux_loss_coef * aux_;
}

double MoeModel::routed_load_peak() const {
  double peak = 0.0;
  for (const RoutingStats& s : stats_) {
    const double routed = std::accumulate(s.counts.begin(), s.counts.end(), 0.0);
    if (routed == 0.0) continue;  // no forward yet
    const double busiest = *std::max_element(s.counts.begin(), s.counts.end());
    peak = std::max(peak, busiest * static_cast<double>(s.counts.size()) / routed);
  }
  return peak;
}

std::vector<double> MoeModel::routed_tokens_per_expert() const {
  std::vector<double> tokens(static_cast<size_t>(moe_.n_experts), 0.0);
  for (const RoutingStats& s : stats_) {
    for (size_t e = 0; e < s.counts.size() && e < tokens.size(); ++e) tokens[e] += s.counts[e];
  }
  return tokens;
}

Result<const float*> MoeModel::ffn_backward(size_t l, const Dims& m) {
  const int64_t nc = m.n * m.c, ec = moe_.n_experts * m.c;
  std::vector<double> aux(aux_dprobs_);
  for (double& g : aux) g *= static_cast<double>(m.loss_scale);
  MoeBlock& block = blocks_[l];
  float* router = dw(layers_[l].ffn[0]);
  if (dispatch_ == ExpertDispatch::kAllToAll) {
    reduce_.resize(static_cast<size_t>(nc));
    NTP_RETURN_IF_ERROR(exchanges_[l].backward(block, scratch_.dx, aux, reduce_, router));
    return static_cast<const float*>(reduce_.data());
  }
  reduce_.resize(static_cast<size_t>(nc + ec));
  // [dh | this call's router gradient]: partial on every rank, summed by one all-reduce.
  std::fill(reduce_.begin() + nc, reduce_.end(), 0.0f);
  block.set_router_grad(reduce_.data() + nc);
  NTP_RETURN_IF_ERROR(
      block.backward(scratch_.dx, aux, std::span<float>(reduce_.data(), static_cast<size_t>(nc))));
  if (moe_.n_shared > 0) {
    dense_ffn_backward(l, m, layers_[l].ffn.data() + 4, 1.0f, reduce_.data());
  }
  NTP_RETURN_IF_ERROR(all_reduce(reduce_));
  for (int64_t i = 0; i < ec; ++i) router[i] += reduce_[static_cast<size_t>(nc + i)];
  return static_cast<const float*>(reduce_.data());
}

double MoeModel::training_flops(const MoeModelConfig& config, int64_t b, int64_t t) {
  const double c = static_cast<double>(config.llama.n_embd);
  const double f = static_cast<double>(config.llama.ffn());
  const double active = static_cast<double>(config.n_experts) * c +
                        static_cast<double>(config.top_k + config.n_shared) * 3.0 * c * f;
  return decoder_flops(config.llama, active, b, t);
}

}  // namespace ntp::model
