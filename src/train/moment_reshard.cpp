#include "train/moment_reshard.h"

#include "core/check.h"

namespace ntp::train {
namespace {

// A description as integers: per block kind, chunk, block, param, the interval count, then the
// intervals' (begin, end).
void describe(int64_t kind, int first_chunk, const std::vector<MomentChunk>& chunks,
              std::vector<int64_t>& out) {
  for (size_t c = 0; c < chunks.size(); ++c) {
    const auto& blocks = chunks[c].layout->blocks();
    for (size_t b = 0; b < blocks.size(); ++b) {
      const auto& intervals = blocks[b].units.intervals();
      out.insert(out.end(), {kind, first_chunk + static_cast<int64_t>(c), static_cast<int64_t>(b),
                             blocks[b].param, static_cast<int64_t>(intervals.size())});
      for (const shard::Interval& i : intervals) out.insert(out.end(), {i.begin, i.end});
    }
  }
}

std::vector<MomentItem> decode(const std::vector<int64_t>& in) {
  std::vector<MomentItem> out;
  for (size_t at = 0; at < in.size();) {
    MomentItem item{in[at],
                    static_cast<int>(in[at + 1]),
                    static_cast<int>(in[at + 2]),
                    static_cast<int>(in[at + 3]),
                    {}};
    const int64_t intervals = in[at + 4];
    at += 5;
    for (int64_t k = 0; k < intervals; ++k, at += 2) item.units.append(in[at], in[at + 1]);
    out.push_back(std::move(item));
  }
  return out;
}

}  // namespace

Result<MomentReshard> MomentReshard::plan(const HeldMoments& held,
                                          const std::vector<MomentChunk>& needed,
                                          const std::vector<ParamGeometry>& geometry,
                                          const std::vector<std::string>& names,
                                          comm::Communicator& world) {
  if (geometry.size() != names.size()) {  // the same on every member: all return alike
    return invalid_argument("moment reshard: " + std::to_string(geometry.size()) +
                            " parameter geometries for " + std::to_string(names.size()) + " names");
  }
  std::vector<int64_t> mine;
  describe(MomentItem::kOwned, 0, held.owned, mine);
  describe(MomentItem::kCopy, static_cast<int>(held.owned.size()), held.copies, mine);
  describe(MomentItem::kNeeded, 0, needed, mine);
  NTP_ASSIGN_OR_RETURN(std::vector<std::vector<int64_t>> all,
                       comm::allgather_varying(world, std::span<const int64_t>(mine)));
  std::vector<std::vector<MomentItem>> items;
  items.reserve(all.size());
  for (const std::vector<int64_t>& d : all) items.push_back(decode(d));
  NTP_ASSIGN_OR_RETURN(std::vector<Transfer> transfers, plan_moment_transfers(items, names));
  return MomentReshard(held, needed, geometry, std::move(transfers), world.rank());
}

MomentReshard::MomentReshard(HeldMoments held, std::vector<MomentChunk> needed,
                             std::vector<ParamGeometry> geometry, std::vector<Transfer> transfers,
                             int me)
    : held_(std::move(held)),
      needed_(std::move(needed)),
      geometry_(std::move(geometry)),
      transfers_(std::move(transfers)),
      me_(me) {}

const MomentChunk& MomentReshard::source_chunk(int index) const {
  const auto owned = static_cast<int>(held_.owned.size());
  return index < owned ? held_.owned[static_cast<size_t>(index)]
                       : held_.copies[static_cast<size_t>(index - owned)];
}

int64_t MomentReshard::elements(const Transfer& t) const {
  const ParamGeometry& g = geometry_[static_cast<size_t>(t.param)];
  return g.outer * t.units.count() * g.inner;
}

Result<int64_t> MomentReshard::run(comm::Communicator& world) {
  const auto n = static_cast<size_t>(world.size());
  std::vector<size_t> send_counts(n, 0), recv_counts(n, 0);
  size_t self_elements = 0;
  for (const Transfer& t : transfers_) {
    const auto e = static_cast<size_t>(2 * elements(t));
    if (t.source == me_ && t.destination == me_) self_elements += e;
    if (t.source == me_ && t.destination != me_)
      send_counts[static_cast<size_t>(t.destination)] += e;
    if (t.destination == me_ && t.source != me_) recv_counts[static_cast<size_t>(t.source)] += e;
  }
  size_t sent = 0, received = 0;
  std::vector<size_t> cursor(n, 0);  // where each source's data starts in `in`
  for (size_t r = 0; r < n; ++r) {
    sent += send_counts[r];
    cursor[r] = received;
    received += recv_counts[r];
  }
  std::vector<float> out(sent), in(received), self(self_elements);

  // Pack (transfers are in destination order, as alltoallv wants them): both moments per block.
  size_t at = 0, self_at = 0;
  for (const Transfer& t : transfers_) {
    if (t.source != me_) continue;
    const MomentChunk& from = source_chunk(t.source_chunk);
    const Block& block = from.layout->blocks()[static_cast<size_t>(t.source_block)];
    std::vector<float>& buffer = t.destination == me_ ? self : out;
    size_t& offset = t.destination == me_ ? self_at : at;
    const ParamGeometry& g = geometry_[static_cast<size_t>(t.param)];
    for (const std::vector<float>* moment : {from.exp_avg, from.exp_avg_sq}) {
      copy_shared_units(g, block, moment->data(), {t.param, t.units, static_cast<int64_t>(offset)},
                        buffer.data());
      offset += static_cast<size_t>(elements(t));
    }
  }
  NTP_RETURN_IF_ERROR(
      world.alltoallv(comm::const_view(out), send_counts, comm::view(in), recv_counts));

  // Unpack, each source's transfers in the order it packed them.
  self_at = 0;
  for (const Transfer& t : transfers_) {
    if (t.destination != me_) continue;
    const MomentChunk& to = needed_[static_cast<size_t>(t.destination_chunk)];
    const Block& block = to.layout->blocks()[static_cast<size_t>(t.destination_block)];
    const std::vector<float>& buffer = t.source == me_ ? self : in;
    size_t& offset = t.source == me_ ? self_at : cursor[static_cast<size_t>(t.source)];
    const ParamGeometry& g = geometry_[static_cast<size_t>(t.param)];
    for (std::vector<float>* moment : {to.exp_avg, to.exp_avg_sq}) {
      copy_shared_units(g, {t.param, t.units, static_cast<int64_t>(offset)}, buffer.data(), block,
                        moment->data());
      offset += static_cast<size_t>(elements(t));
    }
  }
  return static_cast<int64_t>(received * sizeof(float));
}

}  // namespace ntp::train
