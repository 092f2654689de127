#include "train/sync_executor.h"

#include <algorithm>

#include "comm/wait_observer.h"
#include "core/check.h"
#include "kernels/cpu/clip.h"
#include "shard/balance.h"
#include "train/fault_point.h"

namespace ntp::train {

struct SyncExecutor::Bucket {
  std::vector<int> params;
  // Fold exchanges: peer-major layouts of what this rank sends (fold_out) and receives (fold_in).
  bool fold = false;
  BlockLayout fold_out, fold_in;
  std::vector<size_t> out_counts, in_counts;  // [tp peer]
  std::vector<float> out_buf, in_buf;
  // DP sets: member-major layouts (member j's slices first j), so a ZeRO chunk is contiguous.
  std::vector<BlockLayout> dp;
  std::vector<std::vector<size_t>> dp_counts;  // [set][member]
  std::vector<std::vector<float>> dp_buf;
  std::vector<int> chunk;   // [set]: index into owned_ (sharded optimizer)
  std::vector<int> mirror;  // [set]: index into mirrors_, -1 for a set of one member
  // Replicated tensors: part p (held by TP rank p after the reduction) all-gathered in the replica.
  bool gather = false;
  BlockLayout gather_layout;
  std::vector<size_t> gather_counts;  // [tp rank]
  std::vector<float> gather_buf, gather_mine;
  // Units of a derived space held by several ranks (WorkerRole::shared_owned): each owner's part
  // all-gathered in the replica, then written into every holder's copy.
  bool copy = false;
  BlockLayout copy_layout;
  std::vector<size_t> copy_counts;  // [tp rank] in communicator order
  std::vector<float> copy_buf, copy_mine;
};

namespace {

// Rows of a replicated tensor in part `part` of `parts`.
shard::IntervalSet replicated_part(const ParamGeometry& g, int parts, int part) {
  return shard::IntervalSet::range(shard::balanced_offset(g.units, parts, part),
                                   shard::balanced_offset(g.units, parts, part + 1));
}

// Member j's share of `units` when a set of `members` splits it (balanced by position).
shard::IntervalSet member_share(const shard::IntervalSet& units, int members, int j) {
  const int64_t n = units.count();
  return take_positions(units, shard::balanced_offset(n, members, j),
                        shard::balanced_offset(n, members, j + 1));
}

// The blocks of `layout` (a DP set's member-major buffer) in member j's chunk, at offsets within
// the chunk.
BlockLayout member_chunk(const BlockLayout& layout, const std::vector<size_t>& counts, int j,
                         const std::vector<ParamGeometry>& geometry) {
  int64_t begin = 0;
  for (int k = 0; k < j; ++k) begin += static_cast<int64_t>(counts[static_cast<size_t>(k)]);
  const int64_t end = begin + static_cast<int64_t>(counts[static_cast<size_t>(j)]);
  BlockLayout chunk;
  for (const Block& block : layout.blocks()) {
    if (block.offset >= begin && block.offset < end) {
      chunk.add(block.param, block.units, geometry[static_cast<size_t>(block.param)]);
    }
  }
  return chunk;
}

}  // namespace

SyncExecutor::SyncExecutor(const WorkerRole& role, std::vector<model::Param>& params,
                           const std::vector<std::vector<int>>& ready_order, SyncComms comms,
                           SyncOptions options)
    : role_(role),
      params_(params),
      comms_(std::move(comms)),
      options_(options),
      epoch_(std::chrono::steady_clock::now()) {
  NTP_CHECK(comms_.dp.size() == role_.dp_sets.size());
  for (const model::Param& p : params_) geometry_.push_back(ParamGeometry::of(p));
  bucket_of_.assign(params_.size(), -1);
  std::vector<int> current;
  int64_t bytes = 0;
  auto close = [&]() {
    if (current.empty()) return;
    buckets_.emplace_back();
    for (int p : current)
      bucket_of_[static_cast<size_t>(p)] = static_cast<int>(buckets_.size()) - 1;
    build_bucket(buckets_.back(), current);
    current.clear();
    bytes = 0;
  };
  for (const std::vector<int>& group : ready_order) {
    for (int p : group) {
      current.push_back(p);
      bytes += shape_numel(params_[static_cast<size_t>(p)].logical_shape) * 4;
    }
    if (bytes >= options_.bucket_bytes) close();
  }
  close();
  for (int b : bucket_of_) NTP_CHECK_MSG(b >= 0, "ready_order must list every parameter once");
  missing_.resize(buckets_.size());
  for (size_t b = 0; b < buckets_.size(); ++b)
    missing_[b] = static_cast<int>(buckets_[b].params.size());
  stats_.buckets.resize(buckets_.size());
  thread_ = std::thread([this] { run(); });
}

SyncExecutor::~SyncExecutor() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

shard::IntervalSet SyncExecutor::local_units(int param) const {
  const ParamGeometry& g = geometry_[static_cast<size_t>(param)];
  if (g.space < 0) return shard::IntervalSet::range(0, g.units);
  return role_.held[static_cast<size_t>(g.space)];
}

float* SyncExecutor::storage(int param, Target target) {
  model::Param& p = params_[static_cast<size_t>(param)];
  return target == Target::kGrad ? p.grad.data() : p.value.data();
}

void SyncExecutor::build_bucket(Bucket& b, const std::vector<int>& params) {
  b.params = params;
  bool any_sharded = false, any_replicated = false;
  for (int p : params)
    (geometry_[static_cast<size_t>(p)].space >= 0 ? any_sharded : any_replicated) = true;

  b.fold = role_.replica_folds && any_sharded;
  if (b.fold) {
    auto build = [&](const std::vector<FoldLink>& links, BlockLayout& layout,
                     std::vector<size_t>& counts) {
      counts.assign(static_cast<size_t>(role_.degree), 0);
      for (int c = 0; c < role_.degree; ++c) {  // in the replica communicator's rank order
        const int q = role_.comm_tp_rank[static_cast<size_t>(c)];
        const int64_t before = layout.size();
        for (const FoldLink& link : links) {
          if (link.peer != q) continue;
          for (int p : params) {
            const ParamGeometry& g = geometry_[static_cast<size_t>(p)];
            if (g.space == link.space) layout.add(p, link.units, g);
          }
        }
        counts[static_cast<size_t>(c)] = static_cast<size_t>(layout.size() - before);
      }
    };
    build(role_.fold_out, b.fold_out, b.out_counts);
    build(role_.fold_in, b.fold_in, b.in_counts);
    b.out_buf.resize(static_cast<size_t>(b.fold_out.size()));
    b.in_buf.resize(static_cast<size_t>(b.fold_in.size()));
  }

  for (const DpSet& set : role_.dp_sets) {
    const int members = static_cast<int>(set.world_ranks.size());
    BlockLayout layout;
    std::vector<size_t> counts(static_cast<size_t>(members), 0);
    for (int j = 0; j < members; ++j) {
      const int64_t before = layout.size();
      for (const DpSlice& slice : set.slices) {
        for (int p : params) {
          const ParamGeometry& g = geometry_[static_cast<size_t>(p)];
          shard::IntervalSet units;
          if (slice.space >= 0 && g.space == slice.space) {
            units = slice.units;
          } else if (slice.space == DpSlice::kReplicated && g.space < 0) {
            units = replicated_part(g, role_.replicated_parts, slice.part);
          } else {
            continue;
          }
          layout.add(p, member_share(units, members, j), g);
        }
      }
      counts[static_cast<size_t>(j)] = static_cast<size_t>(layout.size() - before);
    }
    b.dp_buf.emplace_back(static_cast<size_t>(layout.size()));
    stats_.dp_bytes += layout.size() * 4;
    if (options_.sharding == OptimizerSharding::kSharded) {
      OwnedChunk chunk;
      chunk.layout = member_chunk(layout, counts, set.my_index, geometry_);
      chunk.grad.resize(static_cast<size_t>(chunk.layout.size()));
      b.chunk.push_back(static_cast<int>(owned_.size()));
      owned_.push_back(std::move(chunk));
      b.mirror.push_back(-1);
      if (members > 1) {  // the previous member's chunk, mirrored here (mirror_moments)
        b.mirror.back() = static_cast<int>(mirrors_.size());
        mirrors_.push_back(
            member_chunk(layout, counts, (set.my_index + members - 1) % members, geometry_));
      }
    }
    b.dp.push_back(std::move(layout));
    b.dp_counts.push_back(std::move(counts));
  }

  b.gather = any_replicated && role_.degree > 1;
  if (b.gather) {
    b.gather_counts.assign(static_cast<size_t>(role_.degree), 0);
    for (int c = 0; c < role_.degree; ++c) {  // part p is TP rank p's, in communicator order
      const int part = role_.comm_tp_rank[static_cast<size_t>(c)];
      if (part >= role_.replicated_parts) continue;
      const int64_t before = b.gather_layout.size();
      for (int p : params) {
        const ParamGeometry& g = geometry_[static_cast<size_t>(p)];
        if (g.space < 0)
          b.gather_layout.add(p, replicated_part(g, role_.replicated_parts, part), g);
      }
      b.gather_counts[static_cast<size_t>(c)] =
          static_cast<size_t>(b.gather_layout.size() - before);
    }
    b.gather_buf.resize(static_cast<size_t>(b.gather_layout.size()));
    b.gather_mine.resize(b.gather_counts[static_cast<size_t>(my_comm_rank())]);
  }

  auto shared_space = [&](int p) {
    const int sp = geometry_[static_cast<size_t>(p)].space;
    if (sp < 0) return false;
    for (const shard::IntervalSet& s : role_.shared_owned[static_cast<size_t>(sp)]) {
      if (!s.empty()) return true;
    }
    return false;
  };
  b.copy = role_.replica_shares && std::any_of(params.begin(), params.end(), shared_space);
  if (b.copy) {
    b.copy_counts.assign(static_cast<size_t>(role_.degree), 0);
    for (int c = 0; c < role_.degree; ++c) {
      const auto q = static_cast<size_t>(role_.comm_tp_rank[static_cast<size_t>(c)]);
      const int64_t before = b.copy_layout.size();
      for (int p : params) {
        if (!shared_space(p)) continue;
        const ParamGeometry& g = geometry_[static_cast<size_t>(p)];
        b.copy_layout.add(p, role_.shared_owned[static_cast<size_t>(g.space)][q], g);
      }
      b.copy_counts[static_cast<size_t>(c)] = static_cast<size_t>(b.copy_layout.size() - before);
    }
    b.copy_buf.resize(static_cast<size_t>(b.copy_layout.size()));
    b.copy_mine.resize(b.copy_counts[static_cast<size_t>(my_comm_rank())]);
  }
}

Status SyncExecutor::allgather_blocks(const BlockLayout& layout, const std::vector<size_t>& counts,
                                      std::vector<float>& mine, std::vector<float>& buf,
                                      Target target) {
  int64_t mine_begin = 0;
  for (int c = 0; c < my_comm_rank(); ++c) {
    mine_begin += static_cast<int64_t>(counts[static_cast<size_t>(c)]);
  }
  const int64_t mine_end = mine_begin + static_cast<int64_t>(mine.size());
  for (const Block& block : layout.blocks()) {
    if (block.offset < mine_begin || block.offset >= mine_end) continue;
    Block shifted = block;
    shifted.offset -= mine_begin;
    copy_shared_units(geometry_[static_cast<size_t>(block.param)],
                      local_block(block.param, local_units(block.param)),
                      storage(block.param, target), shifted, mine.data());
  }
  NTP_RETURN_IF_ERROR(comms_.replica->allgather(comm::const_view(mine), comm::view(buf), counts));
  for (const Block& block : layout.blocks()) {
    copy_shared_units(geometry_[static_cast<size_t>(block.param)], block, buf.data(),
                      local_block(block.param, local_units(block.param)),
                      storage(block.param, target));
  }
  return ok_status();
}

Status SyncExecutor::copy_to_holders(Bucket& b, Target target) {
  if (!b.copy) return ok_status();
  return allgather_blocks(b.copy_layout, b.copy_counts, b.copy_mine, b.copy_buf, target);
}

Status SyncExecutor::collect(Bucket& b, Target source) {
  if (b.fold) {
    for (const Block& block : b.fold_out.blocks()) {
      copy_shared_units(geometry_[static_cast<size_t>(block.param)],
                        local_block(block.param, local_units(block.param)),
                        storage(block.param, source), block, b.out_buf.data());
    }
    NTP_RETURN_IF_ERROR(comms_.replica->alltoallv(comm::const_view(b.out_buf), b.out_counts,
                                                  comm::view(b.in_buf), b.in_counts));
    for (size_t q = 0; q < b.out_counts.size(); ++q) {
      if (static_cast<int>(q) != my_comm_rank())
        stats_.fold_bytes_sent += static_cast<int64_t>(b.out_counts[q]) * 4;
    }
  }
  for (size_t i = 0; i < b.dp.size(); ++i) {
    float* buf = b.dp_buf[i].data();
    for (const Block& block : b.dp[i].blocks()) {
      const ParamGeometry& g = geometry_[static_cast<size_t>(block.param)];
      copy_shared_units(g, local_block(block.param, local_units(block.param)),
                        storage(block.param, source), block, buf);
      for (const Block& in : b.fold_in.blocks()) {
        if (in.param == block.param) copy_shared_units(g, in, b.in_buf.data(), block, buf);
      }
    }
  }
  return ok_status();
}

Status SyncExecutor::reduce(Bucket& b) {
  for (size_t i = 0; i < b.dp.size(); ++i) {
    comm::Communicator* dp = comms_.dp[i];
    std::vector<float>& buf = b.dp_buf[i];
    if (options_.sharding == OptimizerSharding::kSharded) {
      OwnedChunk& chunk = owned_[static_cast<size_t>(b.chunk[i])];
      if (dp->size() == 1) {
        chunk.grad = buf;
      } else {
        NTP_RETURN_IF_ERROR(
            dp->reduce_scatter(comm::const_view(buf), comm::view(chunk.grad), b.dp_counts[i]));
      }
    } else if (dp->size() > 1) {
      NTP_RETURN_IF_ERROR(dp->allreduce(comm::view(buf)));
    }
  }
  return ok_status();
}

Status SyncExecutor::distribute(Bucket& b, Target target) {
  for (size_t i = 0; i < b.dp.size(); ++i) {
    for (const Block& block : b.dp[i].blocks()) {
      copy_shared_units(geometry_[static_cast<size_t>(block.param)], block, b.dp_buf[i].data(),
                        local_block(block.param, local_units(block.param)),
                        storage(block.param, target));
    }
  }
  if (b.fold) {
    // The reverse exchange: the units this rank received go back to their owners.
    for (const Block& in : b.fold_in.blocks()) {
      for (size_t i = 0; i < b.dp.size(); ++i) {
        for (const Block& block : b.dp[i].blocks()) {
          if (block.param != in.param) continue;
          copy_shared_units(geometry_[static_cast<size_t>(in.param)], block, b.dp_buf[i].data(), in,
                            b.in_buf.data());
        }
      }
    }
    NTP_RETURN_IF_ERROR(comms_.replica->alltoallv(comm::const_view(b.in_buf), b.in_counts,
                                                  comm::view(b.out_buf), b.out_counts));
    for (size_t q = 0; q < b.in_counts.size(); ++q) {
      if (static_cast<int>(q) != my_comm_rank())
        stats_.fold_bytes_sent += static_cast<int64_t>(b.in_counts[q]) * 4;
    }
    for (const Block& out : b.fold_out.blocks()) {
      copy_shared_units(geometry_[static_cast<size_t>(out.param)], out, b.out_buf.data(),
                        local_block(out.param, local_units(out.param)), storage(out.param, target));
    }
  }
  if (b.gather) {
    NTP_RETURN_IF_ERROR(
        allgather_blocks(b.gather_layout, b.gather_counts, b.gather_mine, b.gather_buf, target));
  }
  return ok_status();
}

Status SyncExecutor::sync_bucket(Bucket& b) {
  NTP_RETURN_IF_ERROR(collect(b, Target::kGrad));
  fault_point("sync");
  NTP_RETURN_IF_ERROR(reduce(b));
  if (options_.sharding == OptimizerSharding::kReplicated) {
    NTP_RETURN_IF_ERROR(distribute(b, Target::kGrad));
    // Copies then step their optimizer state with the owner's gradient: the same bits.
    NTP_RETURN_IF_ERROR(copy_to_holders(b, Target::kGrad));
  }
  return ok_status();
}

double SyncExecutor::accounted_sum_of_squares() const {
  double sum = 0.0;
  for (const Bucket& b : buckets_) {
    for (size_t i = 0; i < b.dp.size(); ++i) {
      if (options_.sharding == OptimizerSharding::kSharded) {
        const std::vector<float>& g = owned_[static_cast<size_t>(b.chunk[i])].grad;
        sum += kernels::cpu::sum_of_squares(g.data(), static_cast<int64_t>(g.size()));
      } else if (role_.dp_sets[i].my_index == 0) {
        sum += kernels::cpu::sum_of_squares(b.dp_buf[i].data(),
                                            static_cast<int64_t>(b.dp_buf[i].size()));
      }
    }
  }
  return sum;
}

Result<std::vector<std::vector<float>>> SyncExecutor::owned_values() {
  NTP_CHECK(options_.sharding == OptimizerSharding::kSharded);
  std::vector<std::vector<float>> out(owned_.size());
  for (Bucket& b : buckets_) {
    NTP_RETURN_IF_ERROR(collect(b, Target::kValue));
    for (size_t i = 0; i < b.dp.size(); ++i) {
      const DpSet& set = role_.dp_sets[i];
      size_t begin = 0;
      for (int j = 0; j < set.my_index; ++j) begin += b.dp_counts[i][static_cast<size_t>(j)];
      const size_t n = b.dp_counts[i][static_cast<size_t>(set.my_index)];
      out[static_cast<size_t>(b.chunk[i])].assign(
          b.dp_buf[i].begin() + static_cast<long>(begin),
          b.dp_buf[i].begin() + static_cast<long>(begin + n));
    }
  }
  return out;
}

Status SyncExecutor::publish_values(const std::vector<std::vector<float>>& values) {
  NTP_CHECK(options_.sharding == OptimizerSharding::kSharded && values.size() == owned_.size());
  for (Bucket& b : buckets_) {
    for (size_t i = 0; i < b.dp.size(); ++i) {
      const std::vector<float>& mine = values[static_cast<size_t>(b.chunk[i])];
      if (comms_.dp[i]->size() == 1) {
        b.dp_buf[i] = mine;
      } else {
        NTP_RETURN_IF_ERROR(comms_.dp[i]->allgather(comm::const_view(mine), comm::view(b.dp_buf[i]),
                                                    b.dp_counts[i]));
      }
    }
    NTP_RETURN_IF_ERROR(distribute(b, Target::kValue));
    NTP_RETURN_IF_ERROR(copy_to_holders(b, Target::kValue));
  }
  return ok_status();
}

Status SyncExecutor::mirror_moments(const std::vector<std::vector<float>>& m,
                                    const std::vector<std::vector<float>>& v,
                                    std::vector<std::vector<float>>& mirror_m,
                                    std::vector<std::vector<float>>& mirror_v) {
  NTP_CHECK(options_.sharding == OptimizerSharding::kSharded);
  mirror_m.resize(mirrors_.size());
  mirror_v.resize(mirrors_.size());
  // One alltoallv per DP set for all buckets: [exp_avg | exp_avg_sq] of each own chunk, bucket
  // by bucket, to the next member; the previous member's back in the same order.
  for (size_t i = 0; i < role_.dp_sets.size(); ++i) {
    if (comms_.dp[i]->size() == 1) continue;  // no peer: no copy (a checkpoint covers it)
    std::vector<float> out;
    size_t in_size = 0;
    for (const Bucket& b : buckets_) {
      const auto own = static_cast<size_t>(b.chunk[i]);
      out.insert(out.end(), m[own].begin(), m[own].end());
      out.insert(out.end(), v[own].begin(), v[own].end());
      in_size += 2 * static_cast<size_t>(mirrors_[static_cast<size_t>(b.mirror[i])].size());
    }
    std::vector<float> in(in_size);
    const auto n = static_cast<size_t>(comms_.dp[i]->size());
    const auto me = static_cast<size_t>(role_.dp_sets[i].my_index);
    std::vector<size_t> send_counts(n, 0), recv_counts(n, 0);
    send_counts[(me + 1) % n] = out.size();
    recv_counts[(me + n - 1) % n] = in.size();
    NTP_RETURN_IF_ERROR(
        comms_.dp[i]->alltoallv(comm::const_view(out), send_counts, comm::view(in), recv_counts));
    auto at = in.begin();
    for (const Bucket& b : buckets_) {
      const auto copy = static_cast<size_t>(b.mirror[i]);
      const auto size = static_cast<long>(mirrors_[copy].size());
      mirror_m[copy].assign(at, at + size);
      mirror_v[copy].assign(at + size, at + 2 * size);
      at += 2 * size;
    }
  }
  return ok_status();
}

double SyncStats::overlap_fraction() const {
  double busy = 0.0, hidden = 0.0;
  for (const auto& [start, end] : buckets) {
    busy += end - start;
    hidden += std::max(0.0, std::min(end, backward_done) - start);
  }
  return busy > 0.0 ? hidden / busy : 1.0;
}

int SyncExecutor::my_comm_rank() const {
  return static_cast<int>(
      std::find(role_.comm_tp_rank.begin(), role_.comm_tp_rank.end(), role_.tp_rank) -
      role_.comm_tp_rank.begin());
}

double SyncExecutor::now() const {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - epoch_).count();
}

void SyncExecutor::grads_ready(std::span<const int> params) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (next_to_queue_ == 0 && queued_ == 0) {
    stats_.fold_bytes_sent = 0;  // a new step
  }
  for (int p : params) --missing_[static_cast<size_t>(bucket_of_[static_cast<size_t>(p)])];
  while (next_to_queue_ < static_cast<int>(buckets_.size()) &&
         missing_[static_cast<size_t>(next_to_queue_)] == 0) {
    ++next_to_queue_;
  }
  if (next_to_queue_ == static_cast<int>(buckets_.size())) stats_.backward_done = now();
  if (next_to_queue_ > queued_) {
    queued_ = next_to_queue_;
    cv_.notify_all();
  }
}

void SyncExecutor::fail(const Status& status) {
  if (error_.ok()) error_ = status;
  const std::string reason = "gradient sync failed: " + status.message();
  comms_.replica->abort(reason);
  for (comm::Communicator* c : comms_.dp) c->abort(reason);
}

void SyncExecutor::run() {
  std::unique_lock<std::mutex> lock(mutex_);
  while (true) {
    cv_.wait(lock, [&] { return stopping_ || done_ < queued_; });
    if (stopping_) return;
    Bucket& b = buckets_[static_cast<size_t>(done_)];
    const bool failed = !error_.ok();
    lock.unlock();
    const double start = now();
    Status s = failed ? ok_status() : sync_bucket(b);
    const double end = now();
    lock.lock();
    stats_.buckets[static_cast<size_t>(done_)] = {start, end};
    if (!s.ok()) fail(s);
    ++done_;
    cv_.notify_all();
  }
}

Status SyncExecutor::wait() {
  std::unique_lock<std::mutex> lock(mutex_);
  if (queued_ < static_cast<int>(buckets_.size())) {
    return internal_error("SyncExecutor::wait: backward reported only " + std::to_string(queued_) +
                          " of " + std::to_string(buckets_.size()) + " buckets");
  }
  {
    // The executor's collectives wait on the peers; so does the training thread while it waits
    // for them (its liveness tracker must not take it as stuck when a peer is).
    const comm::ScopedWait observed;
    cv_.wait(lock, [&] { return done_ == static_cast<int>(buckets_.size()); });
  }
  for (size_t b = 0; b < buckets_.size(); ++b)
    missing_[b] = static_cast<int>(buckets_[b].params.size());
  next_to_queue_ = queued_ = done_ = 0;
  return error_;
}

}  // namespace ntp::train
