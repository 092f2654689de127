#include "comm/gloo_tree.h"

#include <algorithm>

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

Status tree_barrier(const Net& net, std::uint64_t slot) {
  if (net.size == 1) return ok_status();
  char token = 1;
  NTP_RETURN_IF_ERROR(reduce_up(net, &token, 1, 1, nullptr, slot));
  return tree_broadcast(net, &token, 1, 0, slot);
}

}  // namespace ntp::comm::gloo_ops
