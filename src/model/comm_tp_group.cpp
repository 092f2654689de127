#include "model/comm_tp_group.h"

#include <vector>

namespace ntp::model {

Status CommTpGroup::all_reduce_sum(std::span<float> data) {
  return comm_.allreduce(comm::view(data), comm::ReduceOp::kSum);
}

Status CommTpGroup::all_gather_v(std::span<const float> in, std::span<float> out,
                                 std::span<const std::size_t> counts) {
  return comm_.allgather(comm::const_view(in), comm::view(out),
                         std::vector<std::size_t>(counts.begin(), counts.end()));
}

Status CommTpGroup::all_to_all_v(std::span<const float> in,
                                 std::span<const std::size_t> send_counts, std::span<float> out,
                                 std::span<const std::size_t> recv_counts) {
  return comm_.alltoallv(
      comm::const_view(in), std::vector<std::size_t>(send_counts.begin(), send_counts.end()),
      comm::view(out), std::vector<std::size_t>(recv_counts.begin(), recv_counts.end()));
}

}  // namespace ntp::model
