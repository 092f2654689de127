// Moving ZeRO-1 optimizer moments from one job's owners to the next job's (live recovery).
//
// In a ZeRO-1 job the AdamW moments of every (parameter, unit) live on one rank, the owner of the
// chunk that holds them (SyncExecutor::owned_chunks), and, while live recovery is on, as a copy
// on the next member of the chunk's DP set (SyncExecutor::mirror_layouts). After a re-formation
// the new job's owners need the moments of their new chunks. Every member describes what it holds
// (its own chunks, then its copies) and what it needs; all-gathered, the descriptions give every
// member the same transfer list (train/moment_plan.h): a needed block comes from the member
// itself when it holds it, else from the lowest world rank that owns it, else from the lowest
// that holds a copy. One alltoallv over the new world communicator moves both moments.
//
// plan() fails with kNotFound, on every member alike, when some needed block is held by no
// member: its owner and the peer with its copy were both lost (the job then falls back to a
// checkpoint). Memory: the transfers' send and receive buffers, at most this member's moments.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "core/status.h"
#include "shard/interval_set.h"
#include "train/moment_plan.h"
#include "train/unit_blocks.h"

namespace ntp::train {

// Blocks of (parameter, units) and their two moments in flat buffers laid out by `layout`.
struct MomentChunk {
  const BlockLayout* layout = nullptr;
  std::vector<float>* exp_avg = nullptr;
  std::vector<float>* exp_avg_sq = nullptr;
};

// What a member holds of the old job's moments: the chunks it owned and the copies it kept.
struct HeldMoments {
  std::vector<MomentChunk> owned, copies;
};

class MomentReshard {
 public:
  // A collective of `world` (the new job's): gathers every member's holdings and needs, and plans.
  // `needed`: this member's chunks in the new job (buffers sized to their layouts). `geometry` and
  // `names`: per parameter, the same on every member.
  static Result<MomentReshard> plan(const HeldMoments& held, const std::vector<MomentChunk>& needed,
                                    const std::vector<ParamGeometry>& geometry,
                                    const std::vector<std::string>& names,
                                    comm::Communicator& world);
  // Moves the moments into the needed chunks. Returns the bytes received from other members.
  Result<int64_t> run(comm::Communicator& world);

  using Transfer = MomentTransfer;

 private:
  MomentReshard(HeldMoments held, std::vector<MomentChunk> needed,
                std::vector<ParamGeometry> geometry, std::vector<Transfer> transfers, int me);
  const MomentChunk& source_chunk(int index) const;
  int64_t elements(const Transfer& t) const;

  HeldMoments held_;
  std::vector<MomentChunk> needed_;
  std::vector<ParamGeometry> geometry_;
  std::vector<Transfer> transfers_;  // every member's, in destination order
  int me_ = 0;
};

}  // namespace ntp::train
