// ThreadTpGroup: TpGroup over the threads of one process (one thread per TP rank), for in-process
// tests and tools: every rank's model runs on its own thread and the collectives meet at a
// barrier and read each other's buffers directly.
//
// Results are deterministic and identical on every rank: the sum is taken in rank order
// 0, 1, ..., size - 1 for every element. A rank's handle must be used by one thread at a time,
// and every rank must call the collectives in the same order with the same counts (as with any
// TpGroup; a mismatch of counts is a checked failure, a missing rank blocks).
// Kernels called from several threads at once must not share the kernel thread pool: use
// kernels::cpu::set_blas_threads(1) first (kernels/cpu/parallel.h).
#pragma once

#include <barrier>
#include <memory>
#include <vector>

#include "model/tp_group.h"

namespace ntp::model {

class ThreadTpGroup final : public TpGroup {
 public:
  // `size` handles sharing one group; handle r is rank r.
  static std::vector<std::unique_ptr<ThreadTpGroup>> create(int size);

  int rank() const override { return rank_; }
  int size() const override { return static_cast<int>(shared_->posted.size()); }
  Status all_reduce_sum(std::span<float> data) override;
  Status all_gather_v(std::span<const float> in, std::span<float> out,
                      std::span<const std::size_t> counts) override;
  Status all_to_all_v(std::span<const float> in, std::span<const std::size_t> send_counts,
                      std::span<float> out, std::span<const std::size_t> recv_counts) override;

 private:
  struct Shared {
    explicit Shared(int n)
        : barrier(n), posted(static_cast<size_t>(n)), posted_counts(static_cast<size_t>(n)) {}
    std::barrier<> barrier;
    std::vector<std::span<const float>> posted;  // each rank's input of the current collective
    std::vector<std::span<const std::size_t>>
        posted_counts;  // each rank's send counts (all_to_all_v)
  };
  ThreadTpGroup(std::shared_ptr<Shared> shared, int rank)
      : shared_(std::move(shared)), rank_(rank) {}

  std::shared_ptr<Shared> shared_;
  int rank_;
  std::vector<float> sum_;  // this rank's result before it overwrites its input
};

}  // namespace ntp::model
