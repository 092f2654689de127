#include "model/comm_tp_group.h"

#include <vector>

namespace ntp::model {

Status CommTpGroup::all_reduce_sum(std::span<float> data) {
  return comm_.allreduce(comm::view(data), comm::ReduceOp::kSum);
}

Status CommTpGroup::all_gather(std::span<const float> in, std::span<float> out) {
  NTP_CHECK(out.size() == in.size() * static_cast<size_t>(size()));
  std::vector<std::size_t> counts(static_cast<size_t>(size()), in.size());
  return comm_.allgather(comm::const_view(in), comm::view(out), std::move(counts));
}

}  // namespace ntp::model
