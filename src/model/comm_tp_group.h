// CommTpGroup: TpGroup over a comm::Communicator (Gloo across processes on CPU).
// The communicator's ranks are the replica's TP ranks; it must outlive this object.
// Errors (a dead peer: kUnavailable) come back as the Communicator reports them.
#pragma once

#include "comm/communicator.h"
#include "model/tp_group.h"

namespace ntp::model {

class CommTpGroup final : public TpGroup {
 public:
  explicit CommTpGroup(comm::Communicator& comm) : comm_(comm) {}
  int rank() const override { return comm_.rank(); }
  int size() const override { return comm_.size(); }
  Status all_reduce_sum(std::span<float> data) override;
  Status all_gather_v(std::span<const float> in, std::span<float> out,
                      std::span<const std::size_t> counts) override;
  Status all_to_all_v(std::span<const float> in, std::span<const std::size_t> send_counts,
                      std::span<float> out, std::span<const std::size_t> recv_counts) override;

 private:
  comm::Communicator& comm_;
};

}  // namespace ntp::model
