#include "comm/gloo_communicator.h"

#include <gloo/common/error.h>

#include <algorithm>
#include <atomic>
#include <csignal>
#include <cstring>
#include <functional>
#include <mutex>
#include <numeric>

#include "comm/gloo_collectives.h"
#include "comm/gloo_tree.h"
#include "comm/pair_mesh.h"
#include "comm/progress_thread.h"
#include "comm/wait_observer.h"
#include "core/rng.h"

namespace ntp::comm {
namespace {

// Slot prefixes of this backend's operations (comm/gloo_collectives.h); Gloo's own collectives
// use 0x01..0x08 (gloo/types.h). Within one communicator every operation also has its own tag.
constexpr std::uint8_t kReduceScatterSlotPrefix = 0x70;
constexpr std::uint8_t kSendRecvSlotPrefix = 0x71;
constexpr std::uint8_t kAllreduceSlotPrefix = 0x72;
constexpr std::uint8_t kAllgatherSlotPrefix = 0x73;
constexpr std::uint8_t kBroadcastSlotPrefix = 0x74;
constexpr std::uint8_t kAlltoallvSlotPrefix = 0x75;
constexpr std::uint8_t kBarrierSlotPrefix = 0x76;
constexpr std::uint8_t kGatherSlotPrefix = 0x77;

// A message's slot: the operation's prefix (8 bits), its tag within the communicator (32 bits)
// and the communicator's group id (24 bits), so that groups sharing a pair never match each
// other's messages.
constexpr std::uint32_t kGroupIdBits = 24;

std::uint64_t slot(std::uint8_t prefix, std::uint32_t tag, std::uint32_t group) {
  return (static_cast<std::uint64_t>(prefix) << 56) | (static_cast<std::uint64_t>(tag) << 24) |
         group;
}

// The id of the group `name` over `members` (mesh ranks): the same on every member, never 0
// (the world's).
std::uint32_t group_id(const std::string& name, const std::vector<int>& members) {
  std::uint64_t hash = splitmix64(0x6e7470);  // "ntp"
  for (char c : name) hash = splitmix64(hash ^ static_cast<unsigned char>(c));
  for (int m : members) hash = splitmix64(hash ^ (static_cast<std::uint64_t>(m) << 8));
  const std::uint32_t mask = (1u << kGroupIdBits) - 1;
  const auto id = static_cast<std::uint32_t>(hash & mask);
  return id == 0 ? 1 : id;
}

// The index of `rank` in `ranks` when they are strictly increasing ranks of a group of `size`;
// -1 when it is not among them, -2 when `ranks` are not such ranks.
int index_in_group(const std::vector<int>& ranks, int rank, int size) {
  int index = -1;
  for (std::size_t i = 0; i < ranks.size(); ++i) {
    if (ranks[i] < 0 || ranks[i] >= size || (i > 0 && ranks[i] <= ranks[i - 1])) return -2;
    if (ranks[i] == rank) index = static_cast<int>(i);
  }
  return index;
}

bool reducible(DType dtype) { return dtype == DType::kFloat32 || dtype == DType::kFloat64; }

void divide(void* data, std::size_t count, DType dtype, int size) {
  if (dtype == DType::kFloat32) {
    auto* p = static_cast<float*>(data);
    for (std::size_t i = 0; i < count; ++i) p[i] /= static_cast<float>(size);
  } else {
    auto* p = static_cast<double*>(data);
    for (std::size_t i = 0; i < count; ++i) p[i] /= static_cast<double>(size);
  }
}

std::size_t total(const std::vector<std::size_t>& counts) {
  return std::accumulate(counts.begin(), counts.end(), std::size_t{0});
}

// A Gloo peer whose socket breaks may make the transport write to a closed connection; without
// this the survivor would die of SIGPIPE instead of getting an error.
void ignore_sigpipe_once() {
  static std::once_flag once;
  std::call_once(once, [] {
    struct sigaction current;
    if (sigaction(SIGPIPE, nullptr, &current) == 0 && current.sa_handler == SIG_DFL) {
      std::signal(SIGPIPE, SIG_IGN);
    }
  });
}

// One group over a PairMesh: `members` are the mesh ranks of its ranks (empty: the group is
// the mesh). Groups of one mesh share its pairs; their messages differ in the group id.
class GlooCommunicator final : public Communicator {
 public:
  GlooCommunicator(GlooOptions options, std::shared_ptr<PairMesh> mesh, std::vector<int> members,
                   std::uint32_t group)
      : options_(std::move(options)),
        mesh_(std::move(mesh)),
        members_(std::move(members)),
        group_(group),
        sparse_(options_.size > options_.full_mesh_max_size),
        progress_(std::make_unique<ProgressThread>()) {}

  ~GlooCommunicator() override {
    progress_.reset();  // joins the progress thread before the pairs may go away
    mesh_->release_group(group_);
  }

  // Starts connecting the pairs this group's algorithms use from the start (every peer of a
  // small group; the ring and tree links of a large one): the first operation awaits them.
  // `also`: mesh ranks of other groups' links to start in the same batch (not awaited here).
  Status start_links(const std::vector<int>& also = {}) {
    links_ = formation_links(members_, rank(), size(), options_.full_mesh_max_size);
    if (also.empty()) return mesh_->start(links_);
    std::vector<int> batch = links_;
    batch.insert(batch.end(), also.begin(), also.end());
    std::sort(batch.begin(), batch.end());
    batch.erase(std::unique(batch.begin(), batch.end()), batch.end());
    return mesh_->start(batch);
  }

  // Awaits what start_links() started; `stop` ends the wait early (kUnavailable).
  Status await_links(const std::function<bool()>& stop) {
    if (links_.empty()) return ok_status();
    NTP_RETURN_IF_ERROR(mesh_->await(links_, stop));
    links_.clear();
    return ok_status();
  }

  int rank() const override { return options_.rank; }
  int size() const override { return options_.size; }
  std::chrono::milliseconds timeout() const override { return options_.timeout; }

  Status health() const override {
    std::lock_guard lock(health_mutex_);
    return health_;
  }

  void abort(const std::string& reason) override {
    mark_broken(unavailable("communicator aborted: " + reason));
    // Wakes every wait of the running operation (progress thread or inline on a caller's
    // thread): it fails at once. An operation that has not registered its buffers yet fails at
    // its first wait; queued and later ones fail before they start (broken).
    in_flight_.abort();
    close_connections_later();
  }

  WorkPtr allreduce_async(View data, ReduceOp op) override {
    return launch(prepare_allreduce(data, op));
  }
  Status allreduce(View data, ReduceOp op) override { return run_now(prepare_allreduce(data, op)); }
  WorkPtr reduce_scatter_async(ConstView input, View output, std::vector<std::size_t> counts,
                               ReduceOp op) override {
    return launch(prepare_reduce_scatter(input, output, std::move(counts), op));
  }
  Status reduce_scatter(ConstView input, View output, std::vector<std::size_t> counts,
                        ReduceOp op) override {
    return run_now(prepare_reduce_scatter(input, output, std::move(counts), op));
  }
  WorkPtr allgather_async(ConstView input, View output, std::vector<std::size_t> counts) override {
    return launch(prepare_allgather(input, output, std::move(counts)));
  }
  Status allgather(ConstView input, View output, std::vector<std::size_t> counts) override {
    return run_now(prepare_allgather(input, output, std::move(counts)));
  }
  WorkPtr alltoallv_async(ConstView input, std::vector<std::size_t> send_counts, View output,
                          std::vector<std::size_t> recv_counts) override {
    return launch(prepare_alltoallv(input, std::move(send_counts), output, std::move(recv_counts)));
  }
  Status alltoallv(ConstView input, std::vector<std::size_t> send_counts, View output,
                   std::vector<std::size_t> recv_counts) override {
    return run_now(
        prepare_alltoallv(input, std::move(send_counts), output, std::move(recv_counts)));
  }
  WorkPtr broadcast_async(View data, int root) override {
    return launch(prepare_broadcast(data, root));
  }
  Status broadcast(View data, int root) override { return run_now(prepare_broadcast(data, root)); }
  WorkPtr gather_async(ConstView input, View output, int root) override {
    return launch(prepare_gather(input, output, root));
  }
  Status gather(ConstView input, View output, int root) override {
    return run_now(prepare_gather(input, output, root));
  }
  WorkPtr send_async(ConstView data, int dst, std::uint32_t tag) override {
    return launch(prepare_send(data, dst, tag));
  }
  Status send(ConstView data, int dst, std::uint32_t tag) override {
    return run_now(prepare_send(data, dst, tag));
  }
  WorkPtr recv_async(View data, int src, std::uint32_t tag) override {
    return launch(prepare_recv(data, src, tag));
  }
  Status recv(View data, int src, std::uint32_t tag) override {
    return run_now(prepare_recv(data, src, tag));
  }
  WorkPtr barrier_async() override { return launch(prepare_barrier()); }
  Status barrier() override { return run_now(prepare_barrier()); }
  // The convenience overloads of the base class stay visible.
  using Communicator::allreduce;
  using Communicator::recv;
  using Communicator::reduce_scatter;
  using Communicator::send;

 private:
  // One operation, checked: either an argument error or the body to run with the next tag.
  using Body = std::function<Status(std::uint32_t)>;
  struct Prepared {
    Status error;
    const char* name = "";
    Body body;
  };

  Prepared prepare_allreduce(View data, ReduceOp op) {
    if (!reducible(data.dtype)) return bad_dtype("allreduce", data.dtype);
    return Prepared{ok_status(), "allreduce", [this, data, op](std::uint32_t tag) -> Status {
                      NTP_RETURN_IF_ERROR(gloo_ops::allreduce(
                          net(), data.data, data.count, dtype_size(data.dtype),
                          gloo_ops::sum_into(data.dtype), slot(kAllreduceSlotPrefix, tag, group_)));
                      if (op == ReduceOp::kAvg) divide(data.data, data.count, data.dtype, size());
                      return ok_status();
                    }};
  }

  Prepared prepare_reduce_scatter(ConstView input, View output, std::vector<std::size_t> counts,
                                  ReduceOp op) {
    if (!reducible(input.dtype)) return bad_dtype("reduce_scatter", input.dtype);
    if (Status s = check_counts("reduce_scatter", counts, input, output, /*scatter=*/true);
        !s.ok()) {
      return Prepared{s, "", {}};
    }
    return Prepared{ok_status(), "reduce_scatter",
                    [this, input, output, counts = std::move(counts), op](std::uint32_t tag) {
                      return reduce_scatter_body(input, output, counts, op, tag);
                    }};
  }

  Prepared prepare_allgather(ConstView input, View output, std::vector<std::size_t> counts) {
    if (Status s = check_counts("allgather", counts, input, output, /*scatter=*/false); !s.ok()) {
      return Prepared{s, "", {}};
    }
    return Prepared{ok_status(), "allgather",
                    [this, input, output, counts = std::move(counts)](std::uint32_t tag) -> Status {
                      const std::size_t element = dtype_size(input.dtype);
                      std::size_t offset = 0;
                      for (int q = 0; q < rank(); ++q) offset += counts[q] * element;
                      if (input.count > 0) {
                        std::memmove(static_cast<char*>(output.data) + offset, input.data,
                                     input.bytes());
                      }
                      return gloo_ops::allgather(net(), output.data, counts, element,
                                                 slot(kAllgatherSlotPrefix, tag, group_));
                    }};
  }

  Prepared prepare_alltoallv(ConstView input, std::vector<std::size_t> send_counts, View output,
                             std::vector<std::size_t> recv_counts) {
    if (input.dtype != output.dtype) return bad_pair("alltoallv", input.dtype, output.dtype);
    if (send_counts.size() != static_cast<std::size_t>(size()) ||
        recv_counts.size() != static_cast<std::size_t>(size()) ||
        total(send_counts) != input.count || total(recv_counts) != output.count) {
      return Prepared{
          invalid_argument(
              "alltoallv on rank " + std::to_string(rank()) +
              ": need size() send/recv counts summing to the input/output element counts (input " +
              std::to_string(input.count) + ", output " + std::to_string(output.count) + ")"),
          "",
          {}};
    }
    return Prepared{ok_status(), "alltoallv",
                    [this, input, output, send_counts = std::move(send_counts),
                     recv_counts = std::move(recv_counts)](std::uint32_t tag) -> Status {
                      const std::size_t element = dtype_size(input.dtype);
                      std::vector<std::size_t> send_bytes(send_counts.size());
                      std::vector<std::size_t> recv_bytes(recv_counts.size());
                      for (std::size_t i = 0; i < send_counts.size(); ++i) {
                        send_bytes[i] = send_counts[i] * element;
                        recv_bytes[i] = recv_counts[i] * element;
                      }
                      return gloo_ops::alltoallv(net(), input.data, send_bytes, output.data,
                                                 recv_bytes,
                                                 slot(kAlltoallvSlotPrefix, tag, group_));
                    }};
  }

  Prepared prepare_broadcast(View data, int root) {
    if (root < 0 || root >= size()) {
      return Prepared{
          invalid_argument("broadcast root " + std::to_string(root) +
                           " is not a rank of a group of size " + std::to_string(size())),
          "",
          {}};
    }
    return Prepared{ok_status(), "broadcast", [this, data, root](std::uint32_t tag) -> Status {
                      return gloo_ops::broadcast(net(), data.data, data.bytes(), root,
                                                 slot(kBroadcastSlotPrefix, tag, group_));
                    }};
  }

  Prepared prepare_gather(ConstView input, View output, int root) {
    if (root < 0 || root >= size()) {
      return Prepared{
          invalid_argument("gather root " + std::to_string(root) +
                           " is not a rank of a group of size " + std::to_string(size())),
          "",
          {}};
    }
    const std::size_t all = input.count * static_cast<std::size_t>(size());
    if (rank() == root && (output.dtype != input.dtype || output.count != all)) {
      return Prepared{
          invalid_argument("gather at root " + std::to_string(root) + ": the output" +
                           " must hold size() x input count = " + std::to_string(all) + " " +
                           dtype_name(input.dtype) + " elements (it holds " +
                           std::to_string(output.count) + " " + dtype_name(output.dtype) + ")"),
          "",
          {}};
    }
    return Prepared{ok_status(), "gather", [this, input, output, root](std::uint32_t tag) {
                      return gloo_ops::gather(net(), input.data, output.data, input.bytes(), root,
                                              slot(kGatherSlotPrefix, tag, group_));
                    }};
  }

  Prepared prepare_send(ConstView data, int dst, std::uint32_t user_tag) {
    if (dst < 0 || dst >= size() || dst == rank()) return bad_peer("send", dst);
    return Prepared{ok_status(), "send", [this, data, dst, user_tag](std::uint32_t) -> Status {
                      return gloo_ops::send(net(), data.data, data.bytes(), dst,
                                            slot(kSendRecvSlotPrefix, user_tag, group_));
                    }};
  }

  Prepared prepare_recv(View data, int src, std::uint32_t user_tag) {
    if (src < 0 || src >= size() || src == rank()) return bad_peer("recv", src);
    return Prepared{ok_status(), "recv", [this, data, src, user_tag](std::uint32_t) -> Status {
                      return gloo_ops::recv(net(), data.data, data.bytes(), src,
                                            slot(kSendRecvSlotPrefix, user_tag, group_));
                    }};
  }

  Prepared prepare_barrier() {
    return Prepared{ok_status(), "barrier", [this](std::uint32_t tag) -> Status {
                      return gloo_ops::barrier(net(), slot(kBarrierSlotPrefix, tag, group_));
                    }};
  }

 public:
  Result<std::unique_ptr<Communicator>> subgroup(const std::vector<int>& ranks,
                                                 const std::string& name) override {
    const int my_index = index_in_group(ranks, rank(), size());
    if (my_index == -2) {
      return invalid_argument("subgroup '" + name +
                              "': ranks must be strictly increasing ranks of the group");
    }
    if (my_index < 0) {
      return invalid_argument("subgroup '" + name + "': rank " + std::to_string(rank()) +
                              " is not a member; only members call subgroup()");
    }
    std::vector<int> members;
    members.reserve(ranks.size());
    for (int r : ranks) members.push_back(mesh_rank(r));
    GlooOptions sub = options_;
    sub.planned_subgroups.clear();
    sub.rank = my_index;
    sub.size = static_cast<int>(ranks.size());
    sub.prefix = options_.prefix + "/g/" + name;
    const std::uint32_t id = group_id(name, members);
    NTP_RETURN_IF_ERROR(mesh_->claim_group(id, sub.prefix));
    auto group = std::make_unique<GlooCommunicator>(sub, mesh_, std::move(members), id);
    NTP_RETURN_IF_ERROR(group->start_links());
    return std::unique_ptr<Communicator>(std::move(group));
  }

 private:
  Prepared bad_dtype(const char* op, DType dtype) {
    return Prepared{invalid_argument(std::string(op) + " cannot reduce " + dtype_name(dtype) +
                                     ": reductions support float32 and float64"),
                    "",
                    {}};
  }
  Prepared bad_pair(const char* op, DType a, DType b) {
    return Prepared{invalid_argument(std::string(op) + ": input is " + dtype_name(a) +
                                     " but output is " + dtype_name(b) + "; they must match"),
                    "",
                    {}};
  }
  Prepared bad_peer(const char* op, int peer) {
    return Prepared{
        invalid_argument(std::string(op) + " peer " + std::to_string(peer) +
                         " is not another rank of a group of size " + std::to_string(size())),
        "",
        {}};
  }

  Status check_counts(const char* op, const std::vector<std::size_t>& counts, ConstView input,
                      View output, bool scatter) const {
    if (input.dtype != output.dtype) {
      return invalid_argument(std::string(op) + ": input is " + dtype_name(input.dtype) +
                              " but output is " + dtype_name(output.dtype));
    }
    if (counts.size() != static_cast<std::size_t>(size())) {
      return invalid_argument(std::string(op) + ": " + std::to_string(counts.size()) +
                              " counts for a group of size " + std::to_string(size()) +
                              "; pass one count per rank");
    }
    const std::size_t mine = counts[static_cast<std::size_t>(rank())];
    const std::size_t all = total(counts);
    const std::size_t want_in = scatter ? all : mine;
    const std::size_t want_out = scatter ? mine : all;
    if (input.count != want_in || output.count != want_out) {
      return invalid_argument(std::string(op) + " on rank " + std::to_string(rank()) +
                              ": input has " + std::to_string(input.count) + " and output " +
                              std::to_string(output.count) + " elements; the counts need " +
                              std::to_string(want_in) + " and " + std::to_string(want_out));
    }
    return ok_status();
  }

  // Closing our side of every connection makes each peer still blocked on us see "connection
  // closed" at once instead of waiting for its timeout; those peers close theirs in turn, so one
  // survivor's failure reaches the whole group in milliseconds. Runs on the progress thread once
  // no operation of this communicator is running (Gloo's pairs are not closed under an operation
  // that uses them), not on the failed operation's thread: Gloo waits for its event loop to tick
  // (up to 10 ms) per pair, and the caller should learn of the failure without that delay.
  // Idempotent. If the communicator is destroyed first, destroying Gloo's context closes them.
  void close_connections_later() {
    (void)progress_->submit([this] {
      try {
        mesh_->closeConnections();
      } catch (const std::exception&) {
        // Best effort: peers still fail by their own timeout.
      }
      return ok_status();
    });
  }

  void mark_broken(const Status& status) {
    std::lock_guard lock(health_mutex_);
    if (health_.ok()) health_ = status;
    broken_.store(true);
  }

  // Wraps `body` for the progress thread (or the calling thread): it takes the next tag, every
  // exception becomes a Status, and any failure other than bad arguments breaks the communicator.
  std::function<Status()> wrap(const char* name, Body body) {
    return [this, name, body = std::move(body)]() -> Status {
      const std::uint32_t tag = next_tag_++;
      if (broken_.load()) return health();
      auto where = [&] {
        return std::string(name) + " on rank " + std::to_string(rank()) + "/" +
               std::to_string(size()) + " (" + options_.prefix + ")";
      };
      Status status;
      try {
        if (!links_.empty()) status = await_links(stopping());
        if (status.ok()) status = body(tag);
      } catch (const gloo::IoException& e) {
        status = unavailable(where() + ": peer dead or hung: " + e.what());
      } catch (const gloo::EnforceNotMet& e) {
        // Gloo's checks of what a peer sent (lengths, slots): a peer that died mid-message.
        status =
            unavailable(where() + ": gloo check failed (peer sent a broken message): " + e.what());
      } catch (const std::exception& e) {
        status = internal_error(where() + ": " + e.what());
      }
      if (!status.ok() && in_flight_.aborted()) {
        // Cut short by abort() (the wait said "aborted"), or failed while the abort arrived:
        // either way the reason the caller needs is the abort's.
        status = unavailable(where() + ": " + health().message());
      }
      if (!status.ok() && status.code() != StatusCode::kInvalidArgument) {
        mark_broken(status);
        close_connections_later();
      }
      return status;
    };
  }

  WorkPtr launch(Prepared op) {
    if (!op.error.ok()) return finished_work(op.error);
    if (broken_.load()) return finished_work(health());
    return progress_->submit(wrap(op.name, std::move(op.body)));
  }

  Status run_now(Prepared op) {
    if (!op.error.ok()) return op.error;
    if (broken_.load()) return health();
    return progress_->run_or_wait(wrap(op.name, std::move(op.body)));
  }

  // Ring reduce-scatter (comm/gloo_collectives.h) on a copy of the input, since the ring adds
  // partial sums in place; this rank's chunk of the copy is the result.
  Status reduce_scatter_body(ConstView input, View output, const std::vector<std::size_t>& counts,
                             ReduceOp op, std::uint32_t tag) {
    const std::size_t element = dtype_size(input.dtype);
    std::size_t offset = 0;
    for (int q = 0; q < rank(); ++q) offset += counts[q] * element;
    if (size() == 1) {
      if (output.count > 0) std::memmove(output.data, input.data, input.bytes());
    } else {
      std::vector<char> acc(static_cast<const char*>(input.data),
                            static_cast<const char*>(input.data) + input.bytes());
      NTP_RETURN_IF_ERROR(gloo_ops::reduce_scatter(net(), acc.data(), counts, element,
                                                   gloo_ops::sum_into(input.dtype),
                                                   slot(kReduceScatterSlotPrefix, tag, group_)));
      if (output.count > 0) std::memcpy(output.data, acc.data() + offset, output.bytes());
    }
    if (op == ReduceOp::kAvg) divide(output.data, output.count, output.dtype, size());
    return ok_status();
  }

  gloo_ops::Net net() {
    gloo_ops::Net n;
    n.context = mesh_;
    n.in_flight = &in_flight_;
    n.timeout = options_.timeout;
    n.scratch = &scratch_;
    n.rank = rank();
    n.size = size();
    n.members = members_.empty() ? nullptr : &members_;
    n.sparse = sparse_;
    n.connect = [this](const std::vector<int>& peers) { return connect_peers(peers, stopping()); };
    return n;
  }

  int mesh_rank(int group_rank) const {
    return members_.empty() ? group_rank : members_[static_cast<std::size_t>(group_rank)];
  }

  // When a wait for links ends early: the rendezvous was cancelled or this group aborted.
  std::function<bool()> stopping() {
    return [this] { return in_flight_.aborted() || (options_.cancel && options_.cancel->load()); };
  }

  Status connect_peers(const std::vector<int>& group_peers, const std::function<bool()>& stop) {
    std::vector<int> peers;
    peers.reserve(group_peers.size());
    for (int q : group_peers) peers.push_back(mesh_rank(q));
    return mesh_->connect(peers, stop);
  }

  GlooOptions options_;
  std::shared_ptr<PairMesh> mesh_;
  std::vector<int> members_;
  std::uint32_t group_;
  bool sparse_;
  // Mesh ranks of the links start_links() started and no operation awaited yet; touched by one
  // operation at a time (like next_tag_).
  std::vector<int> links_;
  mutable std::mutex health_mutex_;
  Status health_;
  std::atomic<bool> broken_{false};
  // The buffers the running operation waits on; abort() wakes them.
  gloo_ops::InFlight in_flight_;
  // Touched by one operation at a time (ProgressThread runs them one by one).
  std::uint32_t next_tag_ = 0;
  std::vector<char> scratch_;
  std::unique_ptr<ProgressThread> progress_;
};

}  // namespace

std::vector<int> formation_links(const std::vector<int>& members, int index, int size,
                                 int full_mesh_max_size) {
  const auto mesh_rank = [&members](int q) {
    return members.empty() ? q : members[static_cast<std::size_t>(q)];
  };
  std::vector<int> links;
  if (size > full_mesh_max_size) {
    for (int q : gloo_ops::sparse_peers(index, size)) links.push_back(mesh_rank(q));
  } else {
    for (int q = 0; q < size; ++q) {
      if (q != index) links.push_back(mesh_rank(q));
    }
  }
  return links;
}

Result<std::unique_ptr<Communicator>> connect_gloo(const GlooOptions& options) {
  if (options.store == nullptr) return invalid_argument("connect_gloo: no store given");
  if (options.size < 1 || options.rank < 0 || options.rank >= options.size) {
    return invalid_argument("connect_gloo: rank " + std::to_string(options.rank) +
                            " is not in [0, " + std::to_string(options.size) + ")");
  }
  if (options.timeout.count() <= 0) {
    return invalid_argument("connect_gloo: timeout must be positive");
  }
  if (options.full_mesh_max_size < 1) {
    return invalid_argument("connect_gloo: full_mesh_max_size must be at least 1, not " +
                            std::to_string(options.full_mesh_max_size));
  }
  auto where = [&options] {
    return "connect_gloo rank " + std::to_string(options.rank) + "/" +
           std::to_string(options.size) + " (" + options.prefix + "): ";
  };
  std::vector<int> planned_links;  // mesh ranks: a subgroup's ranks are the world's
  for (const std::vector<int>& ranks : options.planned_subgroups) {
    const int index = index_in_group(ranks, options.rank, options.size);
    if (index < 0) {
      return invalid_argument(where() + "a planned subgroup of " + std::to_string(ranks.size()) +
                              " ranks is not strictly increasing ranks of the world with rank " +
                              std::to_string(options.rank) + " among them");
    }
    const std::vector<int> links =
        formation_links(ranks, index, static_cast<int>(ranks.size()), options.full_mesh_max_size);
    planned_links.insert(planned_links.end(), links.begin(), links.end());
  }
  if (options.cancel && options.cancel->load()) {
    return unavailable(where() + "rendezvous cancelled");
  }
  ignore_sigpipe_once();
  NTP_ASSIGN_OR_RETURN(std::shared_ptr<PairMesh> mesh,
                       PairMesh::create({.store = options.store,
                                         .rank = options.rank,
                                         .size = options.size,
                                         .prefix = options.prefix,
                                         .timeout = options.timeout,
                                         .hostname = options.hostname}));
  NTP_RETURN_IF_ERROR(mesh->claim_group(0, options.prefix));
  auto world = std::make_unique<GlooCommunicator>(options, std::move(mesh), std::vector<int>(), 0);
  const ScopedWait observed;
  const std::shared_ptr<const std::atomic<bool>> cancel = options.cancel;
  Status s = world->start_links(planned_links);
  if (s.ok()) s = world->await_links([cancel] { return cancel && cancel->load(); });
  if (!s.ok()) {
    return unavailable(where() + s.message());
  }
  return std::unique_ptr<Communicator>(std::move(world));
}

}  // namespace ntp::comm
