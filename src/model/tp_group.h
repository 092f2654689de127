// TpGroup: the collectives a tensor-parallel replica needs, over the ranks of one replica.
//
// The model codes against this small interface; CommTpGroup (model/comm_tp_group.h) implements it
// with a comm::Communicator (Gloo across processes), SoloTpGroup is degree 1. Every rank calls the
// collectives in the same order with the same counts.
#pragma once

#include <cstddef>
#include <span>

#include "core/status.h"

namespace ntp::model {

class TpGroup {
 public:
  virtual ~TpGroup() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // In place: data <- sum over ranks of data.
  virtual Status all_reduce_sum(std::span<float> data) = 0;
  // out (the sum of counts) <- rank r's `in` (counts[r] values) at the sum of counts[0..r).
  // counts.size() == size(), the same on every rank; in.size() == counts[rank()].
  virtual Status all_gather_v(std::span<const float> in, std::span<float> out,
                              std::span<const std::size_t> counts) = 0;
  // `in` is size() consecutive pieces, send_counts[d] values for rank d; out receives size()
  // consecutive pieces, recv_counts[s] values from rank s, which must equal rank s's
  // send_counts[rank()] (counts may be 0).
  virtual Status all_to_all_v(std::span<const float> in, std::span<const std::size_t> send_counts,
                              std::span<float> out, std::span<const std::size_t> recv_counts) = 0;

  // out (size() * in.size() values) <- rank r's `in` at offset r * in.size().
  Status all_gather(std::span<const float> in, std::span<float> out);
};

// Degree 1: every collective is a copy.
class SoloTpGroup final : public TpGroup {
 public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  Status all_reduce_sum(std::span<float>) override { return ok_status(); }
  Status all_gather_v(std::span<const float> in, std::span<float> out,
                      std::span<const std::size_t> counts) override;
  Status all_to_all_v(std::span<const float> in, std::span<const std::size_t> send_counts,
                      std::span<float> out, std::span<const std::size_t> recv_counts) override;
};

}  // namespace ntp::model
