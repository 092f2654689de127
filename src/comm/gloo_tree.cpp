#include "comm/gloo_tree.h"

#include <algorithm>
#include <cstring>

#include "comm/gloo_tracked.h"

namespace ntp::comm::gloo_ops {
namespace {

// The children's messages into scratch, in children order; OK once all arrived.
Status receive_children(const Net& net, const TreeLinks& links, std::size_t bytes,
                        std::uint64_t slot) {
  if (links.children.empty() || bytes == 0) return ok_status();
  std::vector<char>& scratch = *net.scratch;
  const std::size_t scratch_bytes = links.children.size() * bytes;
  if (scratch.size() < scratch_bytes) scratch.resize(scratch_bytes);
  Tracked theirs(net, scratch.data(), scratch_bytes);
  for (std::size_t i = 0; i < links.children.size(); ++i) {
    theirs.recv(links.children[i], slot, i * bytes, bytes);
  }
  for (std::size_t i = 0; i < links.children.size(); ++i) {
    NTP_RETURN_IF_ERROR(theirs.wait_recv());
  }
  return ok_status();
}

// Up the tree rooted at 0: children's partial results are added (when `reduce` is set) into
// `data` nearest subtree first, then `data` goes to the parent.
Status reduce_up(const Net& net, char* data, std::size_t count, std::size_t element,
                 ReduceFn reduce, std::uint64_t slot) {
  const TreeLinks links = binomial_tree(net.rank, net.size, 0);
  const std::size_t bytes = count * element;
  NTP_RETURN_IF_ERROR(receive_children(net, links, bytes, slot));
  if (reduce != nullptr) {
    for (std::size_t i = 0; i < links.children.size(); ++i) {
      reduce(data, net.scratch->data() + i * bytes, count);
    }
  }
  if (links.parent < 0) return ok_status();
  Tracked mine(net, data, bytes);
  mine.send(links.parent, slot, 0, bytes);
  return mine.wait_send();
}

// The ranks of v's subtree in the tree over n: v .. v + span - 1 in tree order.
int subtree_span(int v, int n) { return v == 0 ? n : std::min(v & -v, n - v); }

}  // namespace

TreeLinks binomial_tree(int rank, int size, int root) {
  TreeLinks links;
  const int v = mod(static_cast<long long>(rank) - root, size);
  int below = size;  // children are v + 2^k for 2^k < below
  if (v > 0) {
    const int lowest = v & -v;
    links.parent = mod(static_cast<long long>(v - lowest) + root, size);
    below = lowest;
  }
  for (int bit = 1; bit < below && v + bit < size; bit <<= 1) {
    links.children.push_back(mod(static_cast<long long>(v + bit) + root, size));
  }
  return links;
}

std::vector<int> sparse_peers(int rank, int size) {
  std::vector<int> peers;
  if (size < 2) return peers;
  peers.push_back(mod(rank + 1, size));
  peers.push_back(mod(rank - 1, size));
  const TreeLinks links = binomial_tree(rank, size, 0);
  if (links.parent >= 0) peers.push_back(links.parent);
  peers.insert(peers.end(), links.children.begin(), links.children.end());
  std::sort(peers.begin(), peers.end());
  peers.erase(std::unique(peers.begin(), peers.end()), peers.end());
  peers.erase(std::remove(peers.begin(), peers.end(), rank), peers.end());
  return peers;
}

Status tree_broadcast(const Net& net, void* data, std::size_t bytes, int root, std::uint64_t slot) {
  if (net.size == 1 || bytes == 0) return ok_status();
  const TreeLinks links = binomial_tree(net.rank, net.size, root);
  Tracked buffer(net, data, bytes);
  if (links.parent >= 0) {
    buffer.recv(links.parent, slot, 0, bytes);
    NTP_RETURN_IF_ERROR(buffer.wait_recv());
  }
  // Farthest subtree first: it is the deepest, so its chain starts earliest.
  for (auto c = links.children.rbegin(); c != links.children.rend(); ++c) {
    buffer.send(*c, slot, 0, bytes);
  }
  for (std::size_t i = 0; i < links.children.size(); ++i) NTP_RETURN_IF_ERROR(buffer.wait_send());
  return ok_status();
}

Status tree_allreduce(const Net& net, void* data, std::size_t count, std::size_t element,
                      ReduceFn reduce, std::uint64_t slot) {
  if (net.size == 1 || count == 0) return ok_status();
  // Up and down share the slot: they move in opposite directions on each pair, and Gloo matches
  // sends to receives per direction.
  NTP_RETURN_IF_ERROR(reduce_up(net, static_cast<char*>(data), count, element, reduce, slot));
  return tree_broadcast(net, data, count * element, 0, slot);
}

Status tree_gather(const Net& net, const void* mine, void* gathered, std::size_t bytes, int root,
                   std::uint64_t slot) {
  const int n = net.size;
  char* out = static_cast<char*>(gathered);
  const auto piece_at = [bytes](int q) { return static_cast<std::size_t>(q) * bytes; };
  if (n == 1 || bytes == 0) {
    if (n == 1 && out + piece_at(net.rank) != mine) std::memmove(out, mine, bytes);
    return ok_status();
  }
  const TreeLinks links = binomial_tree(net.rank, n, root);
  const int v = mod(static_cast<long long>(net.rank) - root, n);
  const int span = subtree_span(v, n);
  // The subtree's pieces in tree order: straight into `gathered` at root 0 (tree order is rank
  // order there), else in scratch.
  char* block = out;
  if (root != 0 || v != 0) {
    std::vector<char>& scratch = *net.scratch;
    if (scratch.size() < piece_at(span)) scratch.resize(piece_at(span));
    block = scratch.data();
  }
  if (block != mine) std::memmove(block, mine, bytes);
  {
    Tracked subtree(net, block, piece_at(span));
    for (const int child : links.children) {
      const int w = mod(static_cast<long long>(child) - root, n);
      subtree.recv(child, slot, piece_at(w - v), piece_at(subtree_span(w, n)));
    }
    for (std::size_t i = 0; i < links.children.size(); ++i) {
      NTP_RETURN_IF_ERROR(subtree.wait_recv());
    }
    if (links.parent >= 0) {
      subtree.send(links.parent, slot, 0, piece_at(span));
      return subtree.wait_send();
    }
  }
  if (block != out) {  // the root of another rank than 0: tree order back to rank order
    for (int w = 0; w < n; ++w) {
      std::memcpy(out + piece_at(mod(static_cast<long long>(w) + root, n)), block + piece_at(w),
                  bytes);
    }
  }
  return ok_status();
}

Status tree_barrier(const Net& net, std::uint64_t slot) {
  if (net.size == 1) return ok_status();
  char token = 1;
  NTP_RETURN_IF_ERROR(reduce_up(net, &token, 1, 1, nullptr, slot));
  return tree_broadcast(net, &token, 1, 0, slot);
}

}  // namespace ntp::comm::gloo_ops
