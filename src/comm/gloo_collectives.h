// Collectives on Gloo's unbound buffers whose every wait another thread can cut short.
//
// Gloo's own algorithms (gloo::allreduce, ...) wait on buffers they create internally, so the
// only ways out of such a wait are the data arriving, the peer's connection breaking, or the
// timeout. The algorithms here create every buffer they wait on through a Tracked, which
// registers it in the communicator's InFlight set; InFlight::abort() calls abortWaitRecv() and
// abortWaitSend() on each, so the running operation returns kUnavailable within microseconds of
// the abort, on whichever thread it runs, and any operation that registers a buffer afterwards
// fails before it waits.
//
// Contracts shared by the functions below (callers: GlooCommunicator, one operation at a time):
// * Called with matching arguments on every rank of the group (size >= 2 unless noted), with
//   a `slot` unique to this operation (Gloo matches messages per pair and slot, in order).
// * Element counts are in elements of `element` bytes; offsets and byte counts are bytes.
// * OK, or kUnavailable when aborted (message "aborted"; the caller substitutes the reason).
//   Gloo's exceptions (peer closed, timeout) propagate to the caller. After a failure the output
//   buffers hold unspecified contents, and Gloo never touches them again: a Tracked's destructor
//   detaches its memory from every pending transfer before it returns.
#pragma once

#include <gloo/context.h>
#include <gloo/transport/unbound_buffer.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <vector>

#include "comm/communicator.h"
#include "core/status.h"

namespace ntp::comm::gloo_ops {

// The unbound buffers the running operation of one communicator may wait on. Thread-safe.
// abort() is sticky: once called, every registered buffer's pending or next wait returns at
// once, and add() refuses new buffers.
class InFlight {
 public:
  // Registers `buffer`; false (not registered) once abort() ran.
  bool add(gloo::transport::UnboundBuffer* buffer);
  // Must be called before `buffer` is destroyed.
  void remove(gloo::transport::UnboundBuffer* buffer);
  void abort();
  bool aborted() const;

 private:
  mutable std::mutex mutex_;
  bool aborted_ = false;
  std::vector<gloo::transport::UnboundBuffer*> buffers_;
};

// What an algorithm needs from its communicator.
struct Net {
  // The pairs, indexed by mesh rank (comm/pair_mesh.h).
  std::shared_ptr<gloo::Context> context;
  InFlight* in_flight = nullptr;
  // Bound on each wait (a wait is the unit of progress).
  std::chrono::milliseconds timeout{30000};
  // Reused scratch memory (receive segments of the ring, the small-message allreduce).
  std::vector<char>* scratch = nullptr;
  // The group: this rank and the size; members[i] is the mesh rank of group rank i (null: the
  // group is the mesh).
  int rank = 0;
  int size = 1;
  const std::vector<int>* members = nullptr;
  // A large group: its pairs are those of a ring (r +- 1) and of the binomial tree rooted at
  // rank 0 (comm/gloo_tree.h), so small messages take the tree and large ones the ring; an
  // operation that names other peers (alltoallv, send/recv, a broadcast from another root)
  // first calls connect() with them (group ranks). A small group has every pair.
  bool sparse = false;
  std::function<Status(const std::vector<int>&)> connect;

  int mesh_rank(int group_rank) const {
    return members == nullptr ? group_rank : (*members)[static_cast<std::size_t>(group_rank)];
  }
};

using ReduceFn = void (*)(void* acc, const void* x, std::size_t count);

// acc[i] += x[i] for float32 / float64.
ReduceFn sum_into(DType dtype);

// In place over `count` elements: ring reduce-scatter then ring allgather, both pipelined in
// segments, so each rank sends 2(n-1)/n of the data; up to kDirectMaxBytes every rank sends its
// data to every other instead (one message latency) and all ranks add the n contributions in
// rank order, so every rank gets bitwise the same result either way.
Status allreduce(const Net& net, void* data, std::size_t count, std::size_t element,
                 ReduceFn reduce, std::uint64_t slot);

// `data` holds sum(counts) elements; on return chunk rank() (at offset sum(counts[0..rank)))
// holds the reduction over ranks of that chunk; other chunks hold partial sums.
Status reduce_scatter(const Net& net, void* data, const std::vector<std::size_t>& counts,
                      std::size_t element, ReduceFn reduce, std::uint64_t slot);

// `output` holds sum(counts) elements, this rank's already at its offset; fills in the others.
Status allgather(const Net& net, void* output, const std::vector<std::size_t>& counts,
                 std::size_t element, std::uint64_t slot);

Status broadcast(const Net& net, void* data, std::size_t bytes, int root, std::uint64_t slot);

// Every rank's `bytes` of `mine` at `root`, in `gathered` (size x bytes, rank q's at q x bytes;
// read on `root` only, where `mine` may be its own place in it). A small group sends to the
// root directly; a large one up the tree (tree_gather), so no rank holds more than its links.
Status gather(const Net& net, const void* mine, void* gathered, std::size_t bytes, int root,
              std::uint64_t slot);

// Piece i of `input` (send_bytes[i]) goes to rank i; piece j of `output` comes from rank j.
Status alltoallv(const Net& net, const void* input, const std::vector<std::size_t>& send_bytes,
                 void* output, const std::vector<std::size_t>& recv_bytes, std::uint64_t slot);

Status barrier(const Net& net, std::uint64_t slot);

// One message; completes when the peer posted the matching recv (send) / the data arrived (recv).
Status send(const Net& net, const void* data, std::size_t bytes, int dst, std::uint64_t slot);
Status recv(const Net& net, void* data, std::size_t bytes, int src, std::uint64_t slot);

// Messages up to this size (total per rank) take the one-round direct paths.
inline constexpr std::size_t kDirectMaxBytes = 64 * 1024;

}  // namespace ntp::comm::gloo_ops
