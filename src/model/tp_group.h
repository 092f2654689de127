// TpGroup: the two collectives a tensor-parallel replica needs, over the ranks of one replica.
//
// The model codes against this small interface; CommTpGroup (model/comm_tp_group.h) implements it
// with a comm::Communicator (Gloo across processes), SoloTpGroup is degree 1. Every rank calls the
// collectives in the same order with the same counts.
#pragma once

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
  // out (size() * in.size() values) <- rank r's `in` at offset r * in.size().
  virtual Status all_gather(std::span<const float> in, std::span<float> out) = 0;
};

// Degree 1: both collectives are copies.
class SoloTpGroup final : public TpGroup {
 public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  Status all_reduce_sum(std::span<float>) override { return ok_status(); }
  Status all_gather(std::span<const float> in, std::span<float> out) override;
};

}  // namespace ntp::model
