#include "comm/gloo_collectives.h"

#include "comm/gloo_tracked.h"
#include "comm/gloo_tree.h"

#include <algorithm>
#include <cstring>
#include <numeric>

namespace ntp::comm::gloo_ops {

bool InFlight::add(gloo::transport::UnboundBuffer* buffer) {
  std::lock_guard lock(mutex_);
  if (aborted_) return false;
  buffers_.push_back(buffer);
  return true;
}

void InFlight::remove(gloo::transport::UnboundBuffer* buffer) {
  std::lock_guard lock(mutex_);
  buffers_.erase(std::remove(buffers_.begin(), buffers_.end(), buffer), buffers_.end());
}

void InFlight::abort() {
  // Under the lock: a buffer is removed (and only then destroyed) under the same lock, so none
  // can go away while it is being woken. Gloo's abort flags are sticky until the next wait
  // consumes them, so a wait that has not started yet returns at once too.
  std::lock_guard lock(mutex_);
  aborted_ = true;
  for (gloo::transport::UnboundBuffer* buffer : buffers_) {
    buffer->abortWaitRecv();
    buffer->abortWaitSend();
  }
}

bool InFlight::aborted() const {
  std::lock_guard lock(mutex_);
  return aborted_;
}

namespace {

// Ring segments: at most this many bytes per message, so that one segment is being reduced while
// the next is on the wire, and the scratch memory stays small.
constexpr std::size_t kMaxSegmentBytes = std::size_t{1} << 20;
// Receives in flight per ring (scratch segments of the reduce-scatter phase).
constexpr std::size_t kDepth = 2;

template <typename T>
void add_into(void* acc, const void* x, std::size_t count) {
  T* a = static_cast<T*>(acc);
  const T* b = static_cast<const T*>(x);
  for (std::size_t i = 0; i < count; ++i) a[i] += b[i];
}

std::vector<std::size_t> byte_offsets(const std::vector<std::size_t>& counts, std::size_t element) {
  std::vector<std::size_t> offsets(counts.size() + 1, 0);
  for (std::size_t i = 0; i < counts.size(); ++i) {
    offsets[i + 1] = offsets[i] + counts[i] * element;
  }
  return offsets;
}

// The ring over `data`, split into size() chunks at the byte `offsets` (size() + 1 entries):
// `reduce_steps` reduce-scatter steps, then `gather_steps` allgather steps, as one pipeline of
// segments. In reduce-scatter step s rank r sends chunk r-s-1 to r+1 and adds chunk r-s-2 from
// r-1 (after n-1 steps chunk r is complete on rank r); in allgather step t it sends chunk r-t and
// receives chunk r-t-1. Whatever a rank sends in step s+1 is what it received in step s, so
// segment k moves on as soon as it arrived (and was added), while the next segments are still
// on the wire. Sends go to r+1 and receives come from r-1 on one slot; Gloo matches them per pair
// in posting order, which both ends follow (unit by unit, empty segments skipped on both).
Status ring(const Net& net, char* data, const std::vector<std::size_t>& offsets,
            std::size_t element, ReduceFn reduce, int reduce_steps, int gather_steps,
            std::uint64_t slot) {
  const int n = net.size;
  const int r = net.rank;
  std::size_t max_chunk = 0;
  for (int c = 0; c < n; ++c) max_chunk = std::max(max_chunk, offsets[c + 1] - offsets[c]);
  if (max_chunk == 0) return ok_status();
  // At least two segments per chunk, so that adding one overlaps receiving the next.
  const std::size_t segment = round_up(std::min(kMaxSegmentBytes, (max_chunk + 1) / 2), element);
  const std::size_t per_chunk = (max_chunk + segment - 1) / segment;
  const int steps = reduce_steps + gather_steps;
  const std::size_t units = static_cast<std::size_t>(steps) * per_chunk;
  const int next = mod(r + 1, n);
  const int prev = mod(r - 1, n);

  auto sent_chunk = [&](int s) {
    return s < reduce_steps ? mod(r - s - 1, n) : mod(r - (s - reduce_steps), n);
  };
  auto received_chunk = [&](int s) {
    return s < reduce_steps ? mod(r - s - 2, n) : mod(r - (s - reduce_steps) - 1, n);
  };
  struct Piece {
    std::size_t offset;
    std::size_t bytes;
  };
  auto piece = [&](int chunk, std::size_t k) {
    const std::size_t begin = offsets[chunk] + k * segment;
    const std::size_t end = offsets[chunk + 1];
    return begin >= end ? Piece{begin, 0} : Piece{begin, std::min(segment, end - begin)};
  };
  auto step_of = [&](std::size_t u) { return static_cast<int>(u / per_chunk); };

  std::vector<char>& scratch = *net.scratch;
  const std::size_t scratch_bytes = reduce_steps > 0 ? kDepth * segment : 0;
  if (scratch.size() < scratch_bytes) scratch.resize(scratch_bytes);
  Tracked buffer(net, data, offsets[static_cast<std::size_t>(n)]);
  Tracked incoming(net, scratch.data(), scratch_bytes);

  auto post_recv = [&](std::size_t u) {
    const int s = step_of(u);
    const Piece p = piece(received_chunk(s), u % per_chunk);
    if (p.bytes == 0) return;
    if (s < reduce_steps) {
      incoming.recv(prev, slot, (u % kDepth) * segment, p.bytes);
    } else {
      buffer.recv(prev, slot, p.offset, p.bytes);
    }
  };
  std::size_t sends = 0;
  auto post_send = [&](std::size_t u) {
    const Piece p = piece(sent_chunk(step_of(u)), u % per_chunk);
    if (p.bytes == 0) return;
    buffer.send(next, slot, p.offset, p.bytes);
    ++sends;
  };

  for (std::size_t k = 0; k < per_chunk; ++k) post_send(k);
  for (std::size_t u = 0; u < std::min(kDepth, units); ++u) post_recv(u);
  for (std::size_t u = 0; u < units; ++u) {
    const int s = step_of(u);
    const Piece p = piece(received_chunk(s), u % per_chunk);
    if (p.bytes > 0) {
      if (s < reduce_steps) {
        NTP_RETURN_IF_ERROR(incoming.wait_recv());
        reduce(data + p.offset, scratch.data() + (u % kDepth) * segment, p.bytes / element);
      } else {
        NTP_RETURN_IF_ERROR(buffer.wait_recv());
      }
    }
    if (u + kDepth < units) post_recv(u + kDepth);
    if (s + 1 < steps) post_send(u + per_chunk);
  }
  for (std::size_t i = 0; i < sends; ++i) NTP_RETURN_IF_ERROR(buffer.wait_send());
  return ok_status();
}

// Every rank sends its `bytes` to every other and adds the n contributions in rank order.
Status direct_allreduce(const Net& net, char* data, std::size_t count, std::size_t element,
                        ReduceFn reduce, std::uint64_t slot) {
  const int n = net.size;
  const int r = net.rank;
  const std::size_t bytes = count * element;
  std::vector<char>& scratch = *net.scratch;
  const std::size_t scratch_bytes = static_cast<std::size_t>(n - 1) * bytes;
  if (scratch.size() < scratch_bytes) scratch.resize(scratch_bytes);
  auto index = [r](int q) { return static_cast<std::size_t>(q < r ? q : q - 1); };
  {
    Tracked mine(net, data, bytes);
    Tracked theirs(net, scratch.data(), scratch_bytes);
    for (int q = 0; q < n; ++q) {
      if (q != r) theirs.recv(q, slot, index(q) * bytes, bytes);
    }
    for (int i = 1; i < n; ++i) mine.send(mod(r + i, n), slot, 0, bytes);
    for (int i = 1; i < n; ++i) NTP_RETURN_IF_ERROR(theirs.wait_recv());
    for (int i = 1; i < n; ++i) NTP_RETURN_IF_ERROR(mine.wait_send());
  }
  auto contribution = [&](int q) -> const char* {
    return q == r ? data : scratch.data() + index(q) * bytes;
  };
  char* acc = r == 0 ? data : scratch.data() + index(0) * bytes;
  for (int q = 1; q < n; ++q) reduce(acc, contribution(q), count);
  if (acc != data) std::memcpy(data, acc, bytes);
  return ok_status();
}

// The links of the tree rooted at `root` (a sparse group connected those of root 0 only).
std::vector<int> sparse_peers_for_root(const Net& net, int root) {
  const TreeLinks links = binomial_tree(net.rank, net.size, root);
  std::vector<int> peers = links.children;
  if (links.parent >= 0) peers.push_back(links.parent);
  return peers;
}

// The peers an alltoallv sends to or receives from.
std::vector<int> named_peers(const Net& net, const std::vector<std::size_t>& send_bytes,
                             const std::vector<std::size_t>& recv_bytes) {
  std::vector<int> peers;
  for (int q = 0; q < net.size; ++q) {
    const auto i = static_cast<std::size_t>(q);
    if (q != net.rank && (send_bytes[i] > 0 || recv_bytes[i] > 0)) peers.push_back(q);
  }
  return peers;
}

}  // namespace

ReduceFn sum_into(DType dtype) {
  return dtype == DType::kFloat32 ? &add_into<float> : &add_into<double>;
}

Status allreduce(const Net& net, void* data, std::size_t count, std::size_t element,
                 ReduceFn reduce, std::uint64_t slot) {
  const int n = net.size;
  if (n == 1 || count == 0) return ok_status();
  char* bytes = static_cast<char*>(data);
  if (net.sparse && count * element <= kTreeMaxBytes) {
    return tree_allreduce(net, data, count, element, reduce, slot);
  }
  if (!net.sparse && count * element * static_cast<std::size_t>(n - 1) <= kDirectMaxBytes) {
    return direct_allreduce(net, bytes, count, element, reduce, slot);
  }
  std::vector<std::size_t> counts(static_cast<std::size_t>(n));
  for (int c = 0; c < n; ++c) {
    counts[static_cast<std::size_t>(c)] =
        count / static_cast<std::size_t>(n) + (static_cast<std::size_t>(c) < count % n ? 1 : 0);
  }
  return ring(net, bytes, byte_offsets(counts, element), element, reduce, n - 1, n - 1, slot);
}

Status reduce_scatter(const Net& net, void* data, const std::vector<std::size_t>& counts,
                      std::size_t element, ReduceFn reduce, std::uint64_t slot) {
  const int n = net.size;
  if (n == 1) return ok_status();
  return ring(net, static_cast<char*>(data), byte_offsets(counts, element), element, reduce, n - 1,
              0, slot);
}

Status allgather(const Net& net, void* output, const std::vector<std::size_t>& counts,
                 std::size_t element, std::uint64_t slot) {
  const int n = net.size;
  const int r = net.rank;
  if (n == 1) return ok_status();
  const std::vector<std::size_t> offsets = byte_offsets(counts, element);
  const std::size_t total = offsets.back();
  if (total > kDirectMaxBytes || net.sparse) {
    return ring(net, static_cast<char*>(output), offsets, element, nullptr, 0, n - 1, slot);
  }
  // Small: every rank sends its piece to every other at once.
  const auto me = static_cast<std::size_t>(r);
  Tracked buffer(net, output, total);
  std::size_t receives = 0;
  for (int q = 0; q < n; ++q) {
    const auto qi = static_cast<std::size_t>(q);
    if (q == r || counts[qi] == 0) continue;
    buffer.recv(q, slot, offsets[qi], offsets[qi + 1] - offsets[qi]);
    ++receives;
  }
  const std::size_t mine = offsets[me + 1] - offsets[me];
  if (mine > 0) {
    for (int i = 1; i < n; ++i) buffer.send(mod(r + i, n), slot, offsets[me], mine);
  }
  for (std::size_t i = 0; i < receives; ++i) NTP_RETURN_IF_ERROR(buffer.wait_recv());
  if (mine > 0) {
    for (int i = 1; i < n; ++i) NTP_RETURN_IF_ERROR(buffer.wait_send());
  }
  return ok_status();
}

Status broadcast(const Net& net, void* data, std::size_t bytes, int root, std::uint64_t slot) {
  const int n = net.size;
  const int r = net.rank;
  if (n == 1 || bytes == 0) return ok_status();
  if (net.sparse && bytes <= kDirectMaxBytes) {
    if (root != 0) NTP_RETURN_IF_ERROR(net.connect(sparse_peers_for_root(net, root)));
    return tree_broadcast(net, data, bytes, root, slot);
  }
  Tracked buffer(net, data, bytes);
  if (bytes <= kDirectMaxBytes) {
    // Small: the root sends to everyone at once.
    if (r != root) {
      buffer.recv(root, slot, 0, bytes);
      return buffer.wait_recv();
    }
    for (int i = 1; i < n; ++i) buffer.send(mod(root + i, n), slot, 0, bytes);
    for (int i = 1; i < n; ++i) NTP_RETURN_IF_ERROR(buffer.wait_send());
    return ok_status();
  }
  // Large: a pipelined chain root -> root+1 -> ... -> root-1 in segments, so each rank sends the
  // data at most once and the chain's latency is n-1 segments, not n-1 messages.
  const std::size_t segment = std::min(kMaxSegmentBytes, std::max(kDirectMaxBytes, bytes / 8));
  const std::size_t segments = (bytes + segment - 1) / segment;
  auto length = [&](std::size_t k) { return std::min(segment, bytes - k * segment); };
  const int position = mod(r - root, n);
  const bool forwards = position + 1 < n;
  if (position > 0) {
    for (std::size_t k = 0; k < segments; ++k) {
      buffer.recv(mod(r - 1, n), slot, k * segment, length(k));
    }
  }
  for (std::size_t k = 0; k < segments; ++k) {
    if (position > 0) NTP_RETURN_IF_ERROR(buffer.wait_recv());
    if (forwards) buffer.send(mod(r + 1, n), slot, k * segment, length(k));
  }
  if (forwards) {
    for (std::size_t k = 0; k < segments; ++k) NTP_RETURN_IF_ERROR(buffer.wait_send());
  }
  return ok_status();
}

Status gather(const Net& net, const void* mine, void* gathered, std::size_t bytes, int root,
              std::uint64_t slot) {
  if (net.sparse) {
    if (root != 0) NTP_RETURN_IF_ERROR(net.connect(sparse_peers_for_root(net, root)));
    return tree_gather(net, mine, gathered, bytes, root, slot);
  }
  const int n = net.size;
  char* out = static_cast<char*>(gathered);
  if (net.rank != root) {
    if (bytes == 0) return ok_status();
    Tracked piece(net, mine, bytes);
    piece.send(root, slot, 0, bytes);
    return piece.wait_send();
  }
  const auto at = [bytes](int q) { return static_cast<std::size_t>(q) * bytes; };
  if (out + at(root) != mine) std::memmove(out + at(root), mine, bytes);
  if (n == 1 || bytes == 0) return ok_status();
  Tracked all(net, out, at(n));
  for (int q = 0; q < n; ++q) {
    if (q != root) all.recv(q, slot, at(q), bytes);
  }
  for (int i = 1; i < n; ++i) NTP_RETURN_IF_ERROR(all.wait_recv());
  return ok_status();
}

Status alltoallv(const Net& net, const void* input, const std::vector<std::size_t>& send_bytes,
                 void* output, const std::vector<std::size_t>& recv_bytes, std::uint64_t slot) {
  const int n = net.size;
  const int r = net.rank;
  const std::vector<std::size_t> send_at = byte_offsets(send_bytes, 1);
  const std::vector<std::size_t> recv_at = byte_offsets(recv_bytes, 1);
  const auto me = static_cast<std::size_t>(r);
  const std::size_t own = std::min(send_bytes[me], recv_bytes[me]);
  if (own > 0) {
    std::memcpy(static_cast<char*>(output) + recv_at[me],
                static_cast<const char*>(input) + send_at[me], own);
  }
  if (n == 1) return ok_status();
  if (net.sparse) NTP_RETURN_IF_ERROR(net.connect(named_peers(net, send_bytes, recv_bytes)));
  Tracked in(net, input, send_at.back());
  Tracked out(net, output, recv_at.back());
  std::size_t receives = 0;
  std::size_t sends = 0;
  // Send to r+i, receive from r-i, so that not every rank starts with rank 0; each send is
  // posted before the matching receive (posting all receives first measured slower, see perf.md).
  for (int i = 1; i < n; ++i) {
    const auto to = static_cast<std::size_t>(mod(r + i, n));
    const auto from = static_cast<std::size_t>(mod(r - i, n));
    if (send_bytes[to] > 0) {
      in.send(static_cast<int>(to), slot, send_at[to], send_bytes[to]);
      ++sends;
    }
    if (recv_bytes[from] > 0) {
      out.recv(static_cast<int>(from), slot, recv_at[from], recv_bytes[from]);
      ++receives;
    }
  }
  for (std::size_t i = 0; i < std::max(sends, receives); ++i) {
    if (i < sends) NTP_RETURN_IF_ERROR(in.wait_send());
    if (i < receives) NTP_RETURN_IF_ERROR(out.wait_recv());
  }
  return ok_status();
}

Status barrier(const Net& net, std::uint64_t slot) {
  // Dissemination: in round k every rank notifies rank + 2^k and hears from rank - 2^k; after
  // ceil(log2 n) rounds everyone has (transitively) heard from everyone. The distances 2^k < n
  // are distinct mod n, so each pair carries at most one message per direction and one slot
  // serves all rounds.
  const int n = net.size;
  const int r = net.rank;
  if (n == 1) return ok_status();
  if (net.sparse) return tree_barrier(net, slot);
  char token = 1;
  char heard[64] = {};
  Tracked out(net, &token, 1);
  Tracked in(net, heard, sizeof(heard));
  std::size_t round = 0;
  for (int distance = 1; distance < n; distance *= 2, ++round) {
    in.recv(mod(r - distance, n), slot, round, 1);
    out.send(mod(r + distance, n), slot, 0, 1);
    NTP_RETURN_IF_ERROR(in.wait_recv());
    NTP_RETURN_IF_ERROR(out.wait_send());
  }
  return ok_status();
}

Status send(const Net& net, const void* data, std::size_t bytes, int dst, std::uint64_t slot) {
  if (bytes == 0) return ok_status();
  if (net.sparse) NTP_RETURN_IF_ERROR(net.connect({dst}));
  Tracked buffer(net, data, bytes);
  buffer.send(dst, slot, 0, bytes);
  return buffer.wait_send();
}

Status recv(const Net& net, void* data, std::size_t bytes, int src, std::uint64_t slot) {
  if (bytes == 0) return ok_status();
  if (net.sparse) NTP_RETURN_IF_ERROR(net.connect({src}));
  Tracked buffer(net, data, bytes);
  buffer.recv(src, slot, 0, bytes);
  return buffer.wait_recv();
}

}  // namespace ntp::comm::gloo_ops
