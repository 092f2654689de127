#include "model/moe_exchange.h"

#include <algorithm>
#include <numeric>
#include <utility>

namespace ntp::model {

namespace {

// counts[i] * scale, as the collectives' element counts.
std::vector<std::size_t> scaled(const std::vector<std::size_t>& counts, int64_t scale) {
  std::vector<std::size_t> out(counts.size());
  for (size_t i = 0; i < counts.size(); ++i) out[i] = counts[i] * static_cast<std::size_t>(scale);
  return out;
}

size_t total(const std::vector<std::size_t>& counts) {
  return std::accumulate(counts.begin(), counts.end(), size_t{0});
}

}  // namespace

MoeExchange::MoeExchange(TpGroup& group, std::vector<int> holders)
    : group_(&group), holders_(std::move(holders)) {}

int64_t MoeExchange::slice_first(int rank, int64_t n) const {
  const int64_t p = group_->size(), base = n / p, rem = n % p;
  return rank * base + std::min<int64_t>(rank, rem);
}

int64_t MoeExchange::slice_count(int rank, int64_t n) const {
  const int64_t p = group_->size();
  return n / p + (rank < n % p ? 1 : 0);
}

std::vector<std::size_t> MoeExchange::gather_counts(int64_t n, int64_t per_token,
                                                    int64_t extra) const {
  std::vector<std::size_t> counts(static_cast<size_t>(group_->size()));
  for (int r = 0; r < group_->size(); ++r) {
    counts[static_cast<size_t>(r)] =
        static_cast<std::size_t>(slice_count(r, n) * per_token + extra);
  }
  return counts;
}

Status MoeExchange::forward(MoeBlock& block, std::span<const float> h, int64_t n,
                            std::span<float> y, RoutingStats& stats) {
  const int64_t c = block.config().hidden;
  if (static_cast<int64_t>(h.size()) != n * c || static_cast<int64_t>(y.size()) != n * c) {
    return invalid_argument("MoeExchange::forward: h and y must hold n * hidden = " +
                            std::to_string(n * c) + " floats");
  }
  n_ = n;
  NTP_RETURN_IF_ERROR(route_and_dispatch(block, h));
  NTP_RETURN_IF_ERROR(run_received(block));
  return combine_and_gather(block, y, stats);
}

void MoeExchange::pack_pairs(const MoeBlock& block, std::span<const float> h) {
  const int64_t c = block.config().hidden, kk = block.config().top_k;
  const int64_t first = slice_first(group_->rank(), n_), mine = slice_count(group_->rank(), n_);
  const std::vector<int64_t>& selected = block.selected();
  const int64_t pairs = mine * kk;
  pairs_to_.assign(static_cast<size_t>(group_->size()), 0);
  for (int64_t p = 0; p < pairs; ++p) {
    ++pairs_to_[static_cast<size_t>(
        holders_[static_cast<size_t>(selected[static_cast<size_t>(p)])])];
  }
  std::vector<std::size_t> next(pairs_to_.size(), 0);  // a counting sort by destination
  std::exclusive_scan(pairs_to_.begin(), pairs_to_.end(), next.begin(), size_t{0});
  pair_token_.resize(static_cast<size_t>(pairs));
  pair_slot_.resize(static_cast<size_t>(pairs));
  send_.resize(static_cast<size_t>(pairs * (c + 1)));
  for (int64_t p = 0; p < pairs; ++p) {
    const int64_t e = selected[static_cast<size_t>(p)];
    const size_t at = next[static_cast<size_t>(holders_[static_cast<size_t>(e)])]++;
    pair_token_[at] = p / kk;
    pair_slot_[at] = p % kk;
    float* row = send_.data() + static_cast<int64_t>(at) * (c + 1);
    std::copy_n(h.data() + (first + p / kk) * c, c, row);
    row[c] = static_cast<float>(e);  // exact: expert ids are far below 2^24
  }
}

Status MoeExchange::route_and_dispatch(MoeBlock& block, std::span<const float> h) {
  const int64_t c = block.config().hidden;
  const int64_t first = slice_first(group_->rank(), n_), mine = slice_count(group_->rank(), n_);
  if (mine > 0) {
    NTP_RETURN_IF_ERROR(
        block.route(h.subspan(static_cast<size_t>(first * c), static_cast<size_t>(mine * c)), mine)
            .status());
  }
  pack_pairs(block, h);
  const size_t ranks = pairs_to_.size();
  const std::vector<std::size_t> ones(ranks, 1);
  std::vector<float> to(pairs_to_.begin(), pairs_to_.end()), from(ranks, 0.0f);
  NTP_RETURN_IF_ERROR(group_->all_to_all_v(to, ones, from, ones));
  pairs_from_.assign(ranks, 0);
  for (size_t s = 0; s < ranks; ++s) pairs_from_[s] = static_cast<std::size_t>(from[s]);
  recv_.resize(total(pairs_from_) * static_cast<size_t>(c + 1));
  return group_->all_to_all_v(send_, scaled(pairs_to_, c + 1), recv_, scaled(pairs_from_, c + 1));
}

Status MoeExchange::run_received(MoeBlock& block) {
  const int64_t c = block.config().hidden;
  const int64_t received = static_cast<int64_t>(total(pairs_from_));
  std::vector<float> x(static_cast<size_t>(received * c));
  std::vector<int64_t> expert(static_cast<size_t>(received));
  for (int64_t r = 0; r < received; ++r) {
    const float* row = recv_.data() + r * (c + 1);
    std::copy_n(row, c, x.data() + r * c);
    expert[static_cast<size_t>(r)] = static_cast<int64_t>(row[c]);
  }
  computed_.resize(static_cast<size_t>(received * c));
  NTP_RETURN_IF_ERROR(block.experts_forward(x, expert, computed_));
  returned_.resize(pair_token_.size() * static_cast<size_t>(c));
  return group_->all_to_all_v(computed_, scaled(pairs_from_, c), returned_, scaled(pairs_to_, c));
}

Status MoeExchange::combine_and_gather(const MoeBlock& block, std::span<float> y,
                                       RoutingStats& stats) {
  const int64_t c = block.config().hidden, ne = block.config().n_experts;
  const int64_t kk = block.config().top_k, mine = slice_count(group_->rank(), n_);
  send_.assign(static_cast<size_t>(mine * c + 2 * ne), 0.0f);  // [slice | counts | prob sums]
  const std::vector<float>& combine = block.combine_weights();
  for (size_t p = 0; p < pair_token_.size(); ++p) {
    const int64_t t = pair_token_[p];
    const float w = combine[static_cast<size_t>(t * kk + pair_slot_[p])];
    const float* out = returned_.data() + static_cast<int64_t>(p) * c;
    float* yt = send_.data() + t * c;
    for (int64_t i = 0; i < c; ++i) yt[i] += w * out[i];
  }
  if (mine > 0) {
    float* counts = send_.data() + mine * c;
    float* probs = counts + ne;
    for (int64_t e = 0; e < ne; ++e) {
      counts[e] = static_cast<float>(block.expert_counts()[static_cast<size_t>(e)]);
      double sum = 0.0;
      for (int64_t t = 0; t < mine; ++t) sum += block.probs()[static_cast<size_t>(t * ne + e)];
      probs[e] = static_cast<float>(sum);
    }
  }
  const std::vector<std::size_t> gathered = gather_counts(n_, c, 2 * ne);
  gathered_.resize(total(gathered));
  NTP_RETURN_IF_ERROR(group_->all_gather_v(send_, gathered_, gathered));
  stats.counts.assign(static_cast<size_t>(ne), 0.0);
  stats.prob_sum.assign(static_cast<size_t>(ne), 0.0);
  const float* part = gathered_.data();
  for (int r = 0; r < group_->size(); ++r) {
    const int64_t count = slice_count(r, n_);
    std::copy_n(part, count * c, y.data() + slice_first(r, n_) * c);
    for (int64_t e = 0; e < ne; ++e) {
      stats.counts[static_cast<size_t>(e)] += part[count * c + e];
      stats.prob_sum[static_cast<size_t>(e)] += part[count * c + ne + e];
    }
    part += count * c + 2 * ne;
  }
  return ok_status();
}

Status MoeExchange::backward(MoeBlock& block, std::span<const float> dy,
                             std::span<const double> aux_dprobs, std::span<float> dh,
                             float* router_grad) {
  if (n_ < 0) return failed_precondition("MoeExchange::backward called before any forward");
  const int64_t c = block.config().hidden;
  if (static_cast<int64_t>(dy.size()) != n_ * c || static_cast<int64_t>(dh.size()) != n_ * c) {
    return invalid_argument("MoeExchange::backward: dy and dh must hold n * hidden = " +
                            std::to_string(n_ * c) + " floats (n of the last forward)");
  }
  std::vector<float> dcombine;
  NTP_RETURN_IF_ERROR(exchange_output_gradients(block, dy, dcombine));
  return gather_input_gradients(block, dcombine, aux_dprobs, dh, router_grad);
}

Status MoeExchange::exchange_output_gradients(MoeBlock& block, std::span<const float> dy,
                                              std::vector<float>& dcombine) {
  const int64_t c = block.config().hidden, kk = block.config().top_k;
  const int64_t first = slice_first(group_->rank(), n_), mine = slice_count(group_->rank(), n_);
  const std::vector<float>& combine = block.combine_weights();
  dcombine.assign(static_cast<size_t>(mine * kk), 0.0f);
  send_.resize(pair_token_.size() * static_cast<size_t>(c));
  for (size_t p = 0; p < pair_token_.size(); ++p) {
    const int64_t t = pair_token_[p];
    const size_t ts = static_cast<size_t>(t * kk + pair_slot_[p]);
    const float* dyt = dy.data() + (first + t) * c;
    const float* out = returned_.data() + static_cast<int64_t>(p) * c;
    float* dout = send_.data() + static_cast<int64_t>(p) * c;
    double dot = 0.0;
    for (int64_t i = 0; i < c; ++i) {
      dot += static_cast<double>(dyt[i]) * out[i];
      dout[i] = combine[ts] * dyt[i];
    }
    dcombine[ts] = static_cast<float>(dot);
  }
  recv_.resize(total(pairs_from_) * static_cast<size_t>(c));
  NTP_RETURN_IF_ERROR(
      group_->all_to_all_v(send_, scaled(pairs_to_, c), recv_, scaled(pairs_from_, c)));
  computed_.resize(recv_.size());
  NTP_RETURN_IF_ERROR(block.experts_backward(recv_, computed_));
  return group_->all_to_all_v(computed_, scaled(pairs_from_, c), returned_, scaled(pairs_to_, c));
}

Status MoeExchange::gather_input_gradients(MoeBlock& block, std::span<const float> dcombine,
                                           std::span<const double> aux_dprobs, std::span<float> dh,
                                           float* router_grad) {
  const int64_t c = block.config().hidden, ne = block.config().n_experts;
  const int64_t mine = slice_count(group_->rank(), n_);
  send_.assign(static_cast<size_t>(mine * c + ne * c), 0.0f);  // [dh slice | router gradient]
  for (size_t p = 0; p < pair_token_.size(); ++p) {
    const float* dx = returned_.data() + static_cast<int64_t>(p) * c;
    float* dht = send_.data() + pair_token_[p] * c;
    for (int64_t i = 0; i < c; ++i) dht[i] += dx[i];
  }
  if (mine > 0) {
    block.set_router_grad(send_.data() + mine * c);
    NTP_RETURN_IF_ERROR(
        block.router_backward(dcombine, aux_dprobs, /*add_aux=*/true,
                              std::span<float>(send_.data(), static_cast<size_t>(mine * c))));
  }
  const std::vector<std::size_t> gathered = gather_counts(n_, c, ne * c);
  gathered_.resize(total(gathered));
  NTP_RETURN_IF_ERROR(group_->all_gather_v(send_, gathered_, gathered));
  std::vector<float> router_sum(static_cast<size_t>(ne * c), 0.0f);
  const float* part = gathered_.data();
  for (int r = 0; r < group_->size(); ++r) {  // rank order: the same sum on every rank
    const int64_t count = slice_count(r, n_);
    std::copy_n(part, count * c, dh.data() + slice_first(r, n_) * c);
    for (int64_t i = 0; i < ne * c; ++i) router_sum[static_cast<size_t>(i)] += part[count * c + i];
    part += count * c + ne * c;
  }
  for (int64_t i = 0; i < ne * c; ++i) router_grad[i] += router_sum[static_cast<size_t>(i)];
  return ok_status();
}

}  // namespace ntp::model
