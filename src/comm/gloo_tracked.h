// Internal to the Gloo backend: the unbound buffer every algorithm of comm/gloo_collectives.h and
// comm/gloo_tree.h waits on, and small helpers they share.
#pragma once

#include <gloo/transport/unbound_buffer.h>

#include <cstddef>
#include <cstdint>
#include <memory>

#include "comm/gloo_collectives.h"
#include "core/non_copyable.h"
#include "core/status.h"

namespace ntp::comm::gloo_ops {

inline Status aborted() { return unavailable("aborted"); }

// An unbound buffer over caller memory, registered in the communicator's InFlight set from
// construction to destruction. When the operation was aborted before it got here, nothing is
// registered, nothing is posted, and the first wait fails. Peers are ranks of the group
// (net.members maps them to the mesh); a peer whose pair is not connected is a bug of the
// algorithm, reported by the next wait as kInternal instead of Gloo's null dereference.
class Tracked : NonCopyable {
 public:
  Tracked(const Net& net, const void* data, std::size_t bytes) : net_(net) {
    if (bytes == 0) return;
    // Gloo never writes into a buffer that only sends.
    buffer_ = net.context->createUnboundBuffer(const_cast<void*>(data), bytes);
    registered_ = net.in_flight->add(buffer_.get());
  }
  ~Tracked() {
    if (registered_) net_.in_flight->remove(buffer_.get());
    // buffer_'s destructor then waits until Gloo's I/O thread has let go of it, and pending
    // transfers never touch its memory again.
  }

  void send(int dst, std::uint64_t slot, std::size_t offset, std::size_t bytes) {
    if (registered_ && reachable(dst)) buffer_->send(net_.mesh_rank(dst), slot, offset, bytes);
  }
  void recv(int src, std::uint64_t slot, std::size_t offset, std::size_t bytes) {
    if (registered_ && reachable(src)) buffer_->recv(net_.mesh_rank(src), slot, offset, bytes);
  }
  Status wait_recv() {
    if (unreachable_ >= 0) return no_pair();
    if (!registered_ || !buffer_->waitRecv(net_.timeout)) return aborted();
    return ok_status();
  }
  Status wait_send() {
    if (unreachable_ >= 0) return no_pair();
    if (!registered_ || !buffer_->waitSend(net_.timeout)) return aborted();
    return ok_status();
  }

 private:
  bool reachable(int peer) {
    if (net_.context->getPair(net_.mesh_rank(peer))) return true;
    unreachable_ = peer;
    return false;
  }
  Status no_pair() const {
    return internal_error("no connection to group rank " + std::to_string(unreachable_) +
                          " (an algorithm talked to a peer it did not connect)");
  }

  const Net& net_;
  std::unique_ptr<gloo::transport::UnboundBuffer> buffer_;
  bool registered_ = false;
  int unreachable_ = -1;
};

inline int mod(long long x, int n) { return static_cast<int>(((x % n) + n) % n); }

inline std::size_t round_up(std::size_t x, std::size_t multiple) {
  return (x + multiple - 1) / multiple * multiple;
}

}  // namespace ntp::comm::gloo_ops
