// MoeExchange: one MoE layer's expert parallelism by all-to-all (ExpertDispatch::kAllToAll,
// model/expert_dispatch.h), on one rank of a TP group of P ranks.
//
// The block's input h [n, hidden] is the same on every rank (attention's all-reduce made it so).
// Forward:
//   1. Rank r routes only its slice of the tokens, [lo_r, lo_r + n_r) (n split evenly, the first
//      n % P ranks one token more): the router runs on n_r rows, not n.
//   2. Each (token, top-k slot) pair goes to the rank holding its expert: an all_to_all_v of the
//      pair counts, then one of the rows [h[t] | expert id] (hidden + 1 floats), in destination
//      order and, per destination, token then slot order.
//   3. The holder runs its experts on the rows it received (MoeBlock::experts_forward) and sends
//      the outputs back by a second all_to_all_v, in the order they came.
//   4. The owner sums each token's outputs times its combine weights into its output slice, and
//      one all_gather_v of [slice | expert counts (E) | router probability sums (E)] gives every
//      rank the whole output and the layer's routing statistics (for the aux loss).
// Backward, given the whole output gradient dy (the same on every rank):
//   5. The owner forms each pair's d combine weight = <dy[t], expert output> itself (it kept the
//      outputs) and sends w * dy[t] to the pair's holder (all_to_all_v, step 2's counts).
//   6. The holder back-propagates its experts (MoeBlock::experts_backward; weight gradients
//      accumulate there) and returns the rows' input gradients (all_to_all_v).
//   7. The owner sums them per token, back-propagates its router over its slice (the aux term
//      on every rank for its own tokens), and one all_gather_v of [dh slice | router gradient
//      (E hidden)] gives every rank the whole dh; the P router gradients are summed in rank order,
//      so every rank adds the same one.
// Every token is routed once and every pair computed once, so the result is kAllReduce's up to
// the order of float sums. Shared experts are not supported here (their TP-sharded partial
// outputs would need the all-reduce this dispatch replaces).
//
// The collectives are the group's (comm::Communicator's alltoallv and allgather under
// CommTpGroup): a dead peer fails them with kUnavailable within the communicator's timeout, or at
// once after an abort, like every other collective of the step.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "core/status.h"
#include "model/moe_block.h"
#include "model/tp_group.h"

namespace ntp::model {

// One layer's routing statistics over all n tokens of a forward: per expert, the routed
// (token, slot) pairs and the sum over tokens of the router probability.
struct RoutingStats {
  std::vector<double> counts;    // [E]
  std::vector<double> prob_sum;  // [E]
};

class MoeExchange {
 public:
  // holders[e] = the group rank holding expert e (every expert held once; `block` holds exactly
  // the experts this rank is listed for).
  MoeExchange(TpGroup& group, std::vector<int> holders);

  // h [n, hidden] (the same on every rank) -> y [n, hidden] (the whole block output, the same on
  // every rank), stats filled. Saves what backward needs.
  Status forward(MoeBlock& block, std::span<const float> h, int64_t n, std::span<float> y,
                 RoutingStats& stats);
  // dy [n, hidden] (the same on every rank) -> dh [n, hidden] (the whole input gradient, the same
  // on every rank); the held experts' gradients accumulate in the block's storage and the whole
  // router gradient is added to router_grad [E hidden]. aux_dprobs [E] as MoeBlock::backward's.
  Status backward(MoeBlock& block, std::span<const float> dy, std::span<const double> aux_dprobs,
                  std::span<float> dh, float* router_grad);

 private:
  // Token slice [first, first + count) of `rank` for n tokens.
  int64_t slice_first(int rank, int64_t n) const;
  int64_t slice_count(int rank, int64_t n) const;
  // The all_gather_v counts for a payload of per_token values per own token plus `extra`.
  std::vector<std::size_t> gather_counts(int64_t n, int64_t per_token, int64_t extra) const;

  // Forward steps 1-2 (see the top): routes this rank's slice, packs its pairs into send_ in
  // destination order (pair_token_, pair_slot_, pairs_to_), exchanges the counts (pairs_from_)
  // and the rows (recv_).
  Status route_and_dispatch(MoeBlock& block, std::span<const float> h);
  void pack_pairs(const MoeBlock& block, std::span<const float> h);
  // Step 3: the held experts on recv_'s rows (computed_), their outputs back (returned_).
  Status run_received(MoeBlock& block);
  // Step 4: the slice's output and routing statistics, gathered from every rank into y, stats.
  Status combine_and_gather(const MoeBlock& block, std::span<float> y, RoutingStats& stats);
  // Backward steps 5-6: dcombine [own tokens, k], w dy to the holders, the experts' backward,
  // the rows' input gradients back (returned_).
  Status exchange_output_gradients(MoeBlock& block, std::span<const float> dy,
                                   std::vector<float>& dcombine);
  // Step 7: the slice's dh and router gradient, gathered from every rank into dh, router_grad.
  Status gather_input_gradients(MoeBlock& block, std::span<const float> dcombine,
                                std::span<const double> aux_dprobs, std::span<float> dh,
                                float* router_grad);

  TpGroup* group_;  // not owned
  std::vector<int> holders_;
  int64_t n_ = -1;  // tokens of the last forward

  // The last forward's pairs, owner side (destination order): local token index and slot.
  std::vector<int64_t> pair_token_, pair_slot_;
  std::vector<std::size_t> pairs_to_, pairs_from_;  // per rank: pairs sent to it / received from it
  std::vector<float> returned_;                     // [pairs sent, hidden] expert outputs back
  std::vector<float> computed_;                     // [pairs received, hidden] this rank's outputs
  std::vector<float> send_, recv_, gathered_;       // scratch
};

}  // namespace ntp::model
