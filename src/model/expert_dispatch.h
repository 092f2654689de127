// ExpertDispatch: how a MoE layer's tokens meet the experts of the ranks of a TP group.
//
//   kAllReduce  every rank routes every token (the block's input is the same on every rank) and
//               runs its own experts on the tokens routed to them; one all-reduce sums the
//               partial outputs, one the partial input gradients (model/moe_model.h). One
//               collective per pass; 2 n hidden (P - 1) / P floats sent per rank (a ring).
//   kAllToAll   each rank routes its own slice of the tokens and sends each (token, expert) pair
//               to the expert's holder with an all-to-all-v; the outputs come back by a second
//               one and an all-gather rebuilds the whole output (model/moe_exchange.h). Four
//               collectives forward, three backward; with uniform routing (1 + 2k / P) n hidden
//               (P - 1) / P floats per rank: less than kAllReduce when P > 2k.
#pragma once

#include <cstdint>
#include <string_view>

#include "core/named_values.h"
#include "core/status.h"

namespace ntp::model {

enum class ExpertDispatch : std::uint8_t { kAllReduce, kAllToAll };

inline constexpr NamedValue<ExpertDispatch> kExpertDispatchNames[] = {
    {ExpertDispatch::kAllReduce, "allreduce"}, {ExpertDispatch::kAllToAll, "alltoall"}};

inline const char* expert_dispatch_name(ExpertDispatch dispatch) {
  return name_of(kExpertDispatchNames, dispatch);
}
// Parses --expert-dispatch; kInvalidArgument names the value and the choices.
inline Result<ExpertDispatch> parse_expert_dispatch(std::string_view text) {
  return parse_named(kExpertDispatchNames, "--expert-dispatch", text);
}

}  // namespace ntp::model
