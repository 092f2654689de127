// Algorithms for large groups (Net::sparse): binomial trees, whose every rank talks to
// O(log n) peers at most and to 2 on average, so a group of thousands needs no full mesh.
//
// Contracts are those of comm/gloo_collectives.h. The tree over n ranks rooted at `root` numbers
// ranks by v = (r - root) mod n: v's parent is v minus its lowest set bit, its children are
// v + 2^k for every 2^k below that bit (below n at the root) with v + 2^k < n.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "comm/gloo_collectives.h"
#include "core/status.h"

namespace ntp::comm::gloo_ops {

struct TreeLinks {
  int parent = -1;            // -1 at the root
  std::vector<int> children;  // nearest subtree first
};
TreeLinks binomial_tree(int rank, int size, int root);

// The peers a sparse group connects when it forms: its ring neighbours and its links in the tree
// rooted at 0. Symmetric: q is in sparse_peers(r) iff r is in sparse_peers(q).
std::vector<int> sparse_peers(int rank, int size);

// Sums up the tree rooted at 0 (each rank adds its children's partial sums to its own, nearest
// subtree first), then sends the root's result down: every rank ends with the same bits.
// Uses net.scratch for the children's messages.
Status tree_allreduce(const Net& net, void* data, std::size_t count, std::size_t element,
                      ReduceFn reduce, std::uint64_t slot);

// The root's `bytes` down the tree rooted at `root` (connected: callers connect the links of a
// root other than 0 first).
Status tree_broadcast(const Net& net, void* data, std::size_t bytes, int root, std::uint64_t slot);

// Every rank's `bytes` at `root`: up the tree rooted at `root`, each rank forwarding its subtree's
// pieces (ranks v .. v + lowest bit of v - 1 in tree order: contiguous) in one message. `mine`
// is this rank's piece; on `root`, `gathered` receives size x bytes, rank q's piece at q x bytes
// (`mine` may be its own place there). Connected: callers connect the links of a root other than
// 0 first. Uses net.scratch on every rank but root 0.
Status tree_gather(const Net& net, const void* mine, void* gathered, std::size_t bytes, int root,
                   std::uint64_t slot);

// Every rank reports up the tree rooted at 0, then the root releases everyone down it.
Status tree_barrier(const Net& net, std::uint64_t slot);

// Sparse groups take the tree for allreduces up to this size, the ring beyond (whose 2(n-1)
// steps of latency the tree's 2 log2(n) undercut until the bandwidth term dominates).
inline constexpr std::size_t kTreeMaxBytes = std::size_t{1} << 20;

}  // namespace ntp::comm::gloo_ops
