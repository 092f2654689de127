// Unit blocks: how gradient, weight and optimizer buffers of the sync are laid out.
//
// Every parameter is viewed as [outer, units, inner] (model/param.h): the units of its TP space,
// or, for a replicated tensor, the rows of its first dimension (outer = 1). A Block is the slab of
// one parameter for a set of units, stored contiguously as [outer, |units|, inner] with units in
// increasing order. A BlockLayout is a sequence of blocks in one flat buffer. Ranks that lay out
// the same blocks in the same order agree element for element on a buffer's meaning, which is
// what fold exchanges, DP reductions and ZeRO shards rely on; a rank's own storage of a parameter
// is the block of the units it holds (its model shard lists them in increasing order).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "model/param.h"
#include "shard/interval_set.h"

namespace ntp::train {

struct ParamGeometry {
  int64_t outer = 1;
  int64_t inner = 1;
  int64_t units = 0;  // logical units (or rows) in the tensor
  // The layout's unit space (an index into ClusterSpec::spaces, ReplicaLayout::units), -1 for
  // replicated tensors (units are rows). It is the parameter's model::UnitSpaceId: layouts list
  // the spaces in that numbering (shard/unit_space.h; WorkerRoleTest checks it for each family).
  int space = -1;
  static ParamGeometry of(const model::Param& param);
};

struct Block {
  int param = 0;
  shard::IntervalSet units;
  int64_t offset = 0;  // first element in the layout's buffer
};

class BlockLayout {
 public:
  // Appends param's slab for `units` (empty sets are skipped).
  void add(int param, shard::IntervalSet units, const ParamGeometry& geometry);
  const std::vector<Block>& blocks() const { return blocks_; }
  int64_t size() const { return size_; }  // elements
  // One past the last element of blocks()[i].
  int64_t block_end(size_t i) const {
    return i + 1 < blocks_.size() ? blocks_[i + 1].offset : size_;
  }
  bool empty() const { return blocks_.empty(); }

 private:
  std::vector<Block> blocks_;
  int64_t size_ = 0;
};

// Copies every (unit, element) that block `from` (stored at from_base) and block `to` (stored at
// to_base) share; both must be blocks of the same parameter with geometry `g`. Returns the number
// of elements copied.
int64_t copy_shared_units(const ParamGeometry& g, const Block& from, const float* from_base,
                          const Block& to, float* to_base);

// The ids at positions [begin, end) of `set` in increasing order (its begin-th to end-th ids).
shard::IntervalSet take_positions(const shard::IntervalSet& set, int64_t begin, int64_t end);

// The rank's own storage of a parameter as a block: `units` are the ids it holds (ascending).
Block local_block(int param, const shard::IntervalSet& units);

// Logical slice ids along param.shard_axis (axis 0 for replicated tensors) that a block of
// `units` covers, in its storage order: the local storage of that block is the logical tensor
// with dimension `axis` cut to these slices (what checkpoints record).
std::vector<int64_t> slice_ids(const model::Param& param, const ParamGeometry& g,
                               const shard::IntervalSet& units);

}  // namespace ntp::train
