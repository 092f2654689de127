// The TCP connections of one family of Gloo communicators: a world and the groups formed over it.
//
// A PairMesh is a gloo::Context over `size` ranks whose pairs are connected on demand, a batch at
// a time, instead of all at once: a group of the family asks for the peers its algorithms talk
// to (every member of a small group; ring and tree neighbours of a large one, comm/gloo_tree.h),
// and a pair that an earlier group connected serves every later one. So the TP, sync and DP
// groups of one layout add no connections to those the world already has when they are small,
// and a member of a 4,096-member world holds a few dozen connections, not 4,095.
//
// Rendezvous per batch: the asking rank creates one pair per new peer, publishes every pair's
// address in one store write (key <prefix>/p/<from>/<to>), and reads the peers' addresses for it
// with one multi-key read per poll, and erases what it read (each key has one reader); then it
// connects the pairs. Both ends of a pair must ask for
// it (any group, any order): every group that names a peer is symmetric (if i's algorithms talk
// to j, j's talk to i). Of a pair's ends the lower address listens (Gloo's rule) and its device
// accepts on its own, so each rank dials its share first and then waits for the dials of the
// rest: no rank waits on a rank that waits.
//
// Thread-safe: groups on different threads may ask for overlapping batches; a pair being
// connected for one is awaited by the others, never connected twice.
#pragma once

#include <gloo/context.h>
#include <gloo/transport/device.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "comm/store.h"
#include "core/status.h"

namespace ntp::comm {

// The key under which mesh rank `from` publishes its address for its link to `to`, in a mesh
// whose keys start with `prefix` (GlooOptions::prefix). Its one reader is `to`, which erases it;
// the domain hierarchy's leaders relay such keys across domains (elastic/address_relay.h).
std::string pair_address_key(const std::string& prefix, int from, int to);

class PairMesh final : public gloo::Context, public std::enable_shared_from_this<PairMesh> {
 public:
  struct Options {
    std::shared_ptr<Store> store;
    int rank = 0;
    int size = 1;
    std::string prefix;  // namespaces the address keys; same on every rank
    std::chrono::milliseconds timeout{30000};
    std::string hostname = "127.0.0.1";
  };

  // kUnavailable when the TCP device cannot be created (bad hostname).
  static Result<std::shared_ptr<PairMesh>> create(const Options& options);
  ~PairMesh() override;

  // Returns once every pair to `peers` (mesh ranks other than rank) is connected. kUnavailable
  // when a peer's address does not appear within the timeout, a connect fails, or `stop`
  // (polled every 5 ms, may be empty) turns true: then the caller gets its answer at once and
  // the connects still under way end at their own timeout, on a thread of their own.
  Status connect(const std::vector<int>& peers, const std::function<bool()>& stop);
  // connect() in two halves: start() creates and publishes the pairs not started yet and returns
  // (their connects go on, on a thread of their own); await() waits for pairs started before.
  // A group starts its links when it forms and awaits them before its first operation, so every
  // group of a formation publishes at once and none waits for a member still forming another.
  Status start(const std::vector<int>& peers);
  Status await(const std::vector<int>& peers, const std::function<bool()>& stop);

  // Group ids name a group's messages on shared pairs (comm/gloo_communicator.cpp). A group
  // claims its id for its lifetime; kInternal when another live group of this rank holds it.
  Status claim_group(std::uint32_t id, const std::string& name);
  void release_group(std::uint32_t id);

 private:
  enum class PairState : std::uint8_t { kNone, kConnecting, kConnected, kFailed };

  PairMesh(Options options, std::shared_ptr<gloo::transport::Device> device);
  // Runs on a detached thread: waits for the peers' addresses, connects, records the outcome.
  // own[i]: this end's address of the pair to peers[i].
  void finish_batch(const std::vector<int>& peers, const std::vector<std::string>& own);
  // Reads the peers' addresses until all arrived (kDeadlineExceeded after the timeout), calling
  // arrived(i, address of peers[i]) as each one does.
  Status exchange_addresses(const std::vector<int>& peers,
                            const std::function<void(std::size_t, const std::string&)>& arrived);
  // Connects the pair to `peer` at `address` (a dial, or the wait for the peer's) and settles it.
  void connect_pair(int peer, const std::string& address);
  std::string address_key(int from, int to) const;
  void settle(int peer, PairState state, const std::string& error);

  Options options_;
  mutable std::mutex mutex_;
  std::condition_variable settled_;
  std::vector<PairState> state_;
  std::vector<std::string> error_;  // [peer]: why its connect failed
  std::set<std::uint32_t> groups_;
};

}  // namespace ntp::comm
