// Spreading a checkpoint's writes over every rank of a data-parallel job.
//
// Every replica holds the same weights and, with a replicated optimizer, the same moments, bit for
// bit, so each element need be written once, by any rank that holds it. The share of one
// (tensor, kind), keyed "tensor:kind", of `bytes` bytes:
//   TP-sharded, viewed as [outer, units, inner]: the units, rotated by a hash of the key, are cut
//     into n = clamp(bytes / min_part_bytes, 1, min(replicas, units)) contiguous parts; part k goes
//     to replica (k + h) mod replicas, where each unit is written by the rank that holds it;
//   replicated (every rank holds every row): the rows are cut into n = clamp(bytes /
//     min_part_bytes, 1, min(writers, rows)) parts; part k goes to writer (k + h) mod writers,
//     writers numbered replica by replica, TP rank within.
// The rotations spread the parts of different tensors over different replicas and ranks (a
// contiguous TP layout would otherwise leave the same ranks idle for every tensor); the minimum
// part size keeps small tensors in one piece. The rule depends only on the key, the sizes and
// the replicas' degrees, so every rank computes its own share alone and the shares of all ranks
// partition every tensor: each byte is written exactly once.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "checkpoint/piece.h"

namespace ntp::checkpoint {

// One writer of the job.
struct SpreadSlot {
  int replica = 0;
  int tp_rank = 0;
  std::vector<int> degrees;  // [replica]: its TP degree; 0 = a replica with no live rank
};

struct SpreadOptions {
  int64_t min_part_bytes = int64_t{64} << 10;
};

// The units of a TP-sharded tensor's state `key` that `slot`'s replica writes: at most two
// [begin, end) runs (one part, wrapping around).
IndexRuns sharded_share(std::string_view key, int64_t units, int64_t bytes, const SpreadSlot& slot,
                        const SpreadOptions& options = {});

// The rows of a replicated tensor's state `key` that `slot` itself writes: empty or one run.
IndexRuns replicated_share(std::string_view key, int64_t rows, int64_t bytes,
                           const SpreadSlot& slot, const SpreadOptions& options = {});

}  // namespace ntp::checkpoint
