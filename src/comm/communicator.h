// Communicator: the collective-communication interface every ntp layer codes against.
//
// A Communicator connects `size()` processes (ranks 0..size-1). Backends: Gloo over TCP on CPU
// (comm/gloo_communicator.h); NCCL on GPU later. Contracts shared by every backend:
//
// * Collectives are called by every rank of the communicator in the same order with matching
//   arguments (same counts vectors, same root, same dtype). Mismatches are bugs in the caller.
// * Operations are asynchronous: `*_async` enqueues the operation on the communicator's progress
//   thread and returns a Work handle at once; operations run one at a time in submission order.
//   The caller must keep the buffers alive and untouched until the Work is done (wait() returned
//   or done() is true). The synchronous forms behave as `*_async(...)->wait()`; a backend may
//   run them on the calling thread when nothing is queued, which saves two thread hand-offs.
// * Failures never hang and never abort the process: every operation finishes within
//   `timeout()` of the moment its progress stalls, with a Status:
//     kUnavailable        a peer is dead (connection closed/reset) or hung (no progress within the
//                         timeout). The communicator is now *broken*: every queued and later
//                         operation fails fast with kUnavailable. Re-form a new communicator
//                         among the survivors (comm/survivors.h) and continue.
//     kInvalidArgument    the arguments are wrong on this rank (size mismatch, bad rank, dtype
//                         not reducible); nothing was sent and the communicator stays usable.
//     kInternal           the backend failed in an unexpected way (treat like kUnavailable).
// * Reductions (sum, avg) are defined for float32 and float64; avg is the sum divided by size()
//   in the element type. Data movement (allgather, alltoallv, broadcast, send/recv) accepts any
//   DType.
// * Element counts may be 0 and may differ per rank (reduce_scatter, allgather, alltoallv).
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

#include "core/status.h"

namespace ntp::comm {

enum class DType : std::uint8_t { kFloat32, kFloat64, kInt32, kInt64, kUInt8 };
enum class ReduceOp : std::uint8_t { kSum, kAvg };

// Bytes per element of `dtype`.
std::size_t dtype_size(DType dtype);
const char* dtype_name(DType dtype);

template <typename T>
constexpr DType dtype_of() {
  using U = std::remove_const_t<T>;
  if constexpr (std::is_same_v<U, float>) return DType::kFloat32;
  if constexpr (std::is_same_v<U, double>) return DType::kFloat64;
  if constexpr (std::is_same_v<U, std::int32_t>) return DType::kInt32;
  if constexpr (std::is_same_v<U, std::int64_t>) return DType::kInt64;
  if constexpr (std::is_same_v<U, std::uint8_t>) return DType::kUInt8;
}

// A typed, non-owning view of `count` elements. The memory is host memory.
struct View {
  void* data = nullptr;
  std::size_t count = 0;
  DType dtype = DType::kFloat32;

  std::size_t bytes() const { return count * dtype_size(dtype); }
};
struct ConstView {
  const void* data = nullptr;
  std::size_t count = 0;
  DType dtype = DType::kFloat32;

  ConstView() = default;
  ConstView(const void* d, std::size_t n, DType t) : data(d), count(n), dtype(t) {}
  ConstView(View v)
      : data(v.data), count(v.count), dtype(v.dtype) {}  // NOLINT: implicit on purpose
  std::size_t bytes() const { return count * dtype_size(dtype); }
};

template <typename T>
View view(std::span<T> s) {
  return View{s.data(), s.size(), dtype_of<T>()};
}
template <typename T>
ConstView const_view(std::span<const T> s) {
  return ConstView{s.data(), s.size(), dtype_of<T>()};
}
template <typename T>
View view(std::vector<T>& v) {
  return View{v.data(), v.size(), dtype_of<T>()};
}
template <typename T>
ConstView const_view(const std::vector<T>& v) {
  return ConstView{v.data(), v.size(), dtype_of<T>()};
}

// Handle of one asynchronous operation. Thread-safe; any thread may wait.
class Work {
 public:
  virtual ~Work() = default;

  // Blocks until the operation has finished and returns its Status. Always returns: the backend
  // bounds every operation by the communicator's timeout.
  virtual Status wait() = 0;
  // Like wait(), but gives up after `timeout` with kDeadlineExceeded while the operation keeps
  // running (wait again later; the buffers are still in use).
  virtual Status wait_for(std::chrono::milliseconds timeout) = 0;
  // True once the operation has finished (successfully or not).
  virtual bool done() const = 0;
};

using WorkPtr = std::shared_ptr<Work>;

class Communicator {
 public:
  virtual ~Communicator() = default;

  virtual int rank() const = 0;
  virtual int size() const = 0;
  // Bound on how long any operation may go without progress before it fails with kUnavailable.
  virtual std::chrono::milliseconds timeout() const = 0;
  // OK while usable; the sticky kUnavailable error once an operation failed or abort() ran.
  virtual Status health() const = 0;
  // Marks the communicator broken: the running operation (if any, whether on the progress thread
  // or inline on a caller's thread) fails with kUnavailable within milliseconds, whatever it
  // waits for, unless it already completed; queued and later operations fail at once. The
  // failures carry `reason`. Once the running operation has ended, the connections are closed so
  // that peers blocked on this rank fail fast too. Idempotent; safe from any thread at any moment
  // (not concurrently with the destructor). This is how a watcher that learned of a fault
  // elsewhere (comm/abort_watch.h) ends every survivor's wait without waiting for timeout().
  virtual void abort(const std::string& reason) = 0;

  // --- asynchronous operations (see the contracts at the top of this file) ---

  // In place: data <- reduce over ranks of data. All ranks pass the same count and dtype.
  virtual WorkPtr allreduce_async(View data, ReduceOp op) = 0;
  // input holds sum(counts) elements on every rank; output receives counts[rank()] elements:
  // rank r gets the reduction of input[offset(r), offset(r) + counts[r]) where offset(r) is the
  // sum of counts[0..r). counts.size() == size().
  virtual WorkPtr reduce_scatter_async(ConstView input, View output,
                                       std::vector<std::size_t> counts, ReduceOp op) = 0;
  // input holds counts[rank()] elements; output receives sum(counts) elements, rank r's input at
  // offset(r). counts.size() == size().
  virtual WorkPtr allgather_async(ConstView input, View output,
                                  std::vector<std::size_t> counts) = 0;
  // input is split into size() consecutive pieces of send_counts[i] elements, piece i goes to
  // rank i; output receives size() consecutive pieces of recv_counts[j] elements from rank j.
  // recv_counts[j] on this rank must equal send_counts[rank()] on rank j.
  virtual WorkPtr alltoallv_async(ConstView input, std::vector<std::size_t> send_counts,
                                  View output, std::vector<std::size_t> recv_counts) = 0;
  // data on `root` is copied to data on every other rank (same count everywhere).
  virtual WorkPtr broadcast_async(View data, int root) = 0;
  // Every rank's input (the same count and dtype everywhere) to `root`: its output receives
  // size() x input.count elements, rank r's input at r x input.count. The output of the other
  // ranks is not touched (it may be empty). A small group's ranks send to the root directly, a
  // large one's go up a tree (no rank connects to all).
  virtual WorkPtr gather_async(ConstView input, View output, int root) = 0;
  // Point to point. A send completes once `dst` has posted the matching recv (same tag, same
  // byte count), so two ranks exchanging must order their calls (e.g. lower rank sends first) or
  // use alltoallv; operations of one communicator run in submission order.
  virtual WorkPtr send_async(ConstView data, int dst, std::uint32_t tag) = 0;
  virtual WorkPtr recv_async(View data, int src, std::uint32_t tag) = 0;
  virtual WorkPtr barrier_async() = 0;

  // --- subgroups ---

  // A new communicator over `ranks` (ranks of this communicator, strictly increasing, must
  // include rank()); its rank i is ranks[i]. Called by exactly the members, which must pass the
  // same `ranks` and `name`; non-members do not call it. `name` distinguishes concurrent groups
  // (e.g. "tp0", "dp3"). The subgroup has its own connections and progress thread.
  virtual Result<std::unique_ptr<Communicator>> subgroup(const std::vector<int>& ranks,
                                                         const std::string& name) = 0;

  // --- synchronous forms (same contracts; see the top of this file) ---

  virtual Status allreduce(View data, ReduceOp op) { return allreduce_async(data, op)->wait(); }
  Status allreduce(View data) { return allreduce(data, ReduceOp::kSum); }
  virtual Status reduce_scatter(ConstView input, View output, std::vector<std::size_t> counts,
                                ReduceOp op) {
    return reduce_scatter_async(input, output, std::move(counts), op)->wait();
  }
  Status reduce_scatter(ConstView input, View output, std::vector<std::size_t> counts) {
    return reduce_scatter(input, output, std::move(counts), ReduceOp::kSum);
  }
  virtual Status allgather(ConstView input, View output, std::vector<std::size_t> counts) {
    return allgather_async(input, output, std::move(counts))->wait();
  }
  virtual Status alltoallv(ConstView input, std::vector<std::size_t> send_counts, View output,
                           std::vector<std::size_t> recv_counts) {
    return alltoallv_async(input, std::move(send_counts), output, std::move(recv_counts))->wait();
  }
  virtual Status broadcast(View data, int root) { return broadcast_async(data, root)->wait(); }
  virtual Status gather(ConstView input, View output, int root) {
    return gather_async(input, output, root)->wait();
  }
  virtual Status send(ConstView data, int dst, std::uint32_t tag) {
    return send_async(data, dst, tag)->wait();
  }
  Status send(ConstView data, int dst) { return send(data, dst, 0); }
  virtual Status recv(View data, int src, std::uint32_t tag) {
    return recv_async(data, src, tag)->wait();
  }
  Status recv(View data, int src) { return recv(data, src, 0); }
  virtual Status barrier() { return barrier_async()->wait(); }
};

// Every rank's `mine`, of any length, on every rank in rank order (an all-gather of the lengths,
// then one of the data). A collective of `c`.
template <typename T>
Result<std::vector<std::vector<T>>> allgather_varying(Communicator& c, std::span<const T> mine) {
  const auto n = static_cast<std::size_t>(c.size());
  const std::vector<std::int64_t> my_length{static_cast<std::int64_t>(mine.size())};
  std::vector<std::int64_t> lengths(n, 0);
  NTP_RETURN_IF_ERROR(
      c.allgather(const_view(my_length), view(lengths), std::vector<std::size_t>(n, 1)));
  std::vector<std::size_t> counts(n);
  std::size_t total = 0;
  for (std::size_t r = 0; r < n; ++r) total += counts[r] = static_cast<std::size_t>(lengths[r]);
  std::vector<T> all(total);
  NTP_RETURN_IF_ERROR(c.allgather(const_view(mine), view(all), counts));
  std::vector<std::vector<T>> out;
  std::size_t offset = 0;
  for (std::size_t r = 0; r < n; ++r) {
    out.emplace_back(all.begin() + static_cast<long>(offset),
                     all.begin() + static_cast<long>(offset + counts[r]));
    offset += counts[r];
  }
  return out;
}

}  // namespace ntp::comm
