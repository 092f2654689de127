#include "train/train_checkpoint.h"

#include <algorithm>
#include <chrono>

#include "checkpoint/checkpoint_dir.h"
#include "checkpoint/model_pieces.h"
#include "core/check.h"
#include "train/unit_blocks.h"

namespace ntp::train {
namespace {

constexpr const char* kMoments[] = {"exp_avg", "exp_avg_sq"};

// The piece holding `units` of param (a block of an owned ZeRO chunk).
checkpoint::PieceSpec block_piece(const model::Param& p, const shard::IntervalSet& units,
                                  const char* kind) {
  const ParamGeometry g = ParamGeometry::of(p);
  checkpoint::PieceSpec spec;
  spec.tensor = p.name;
  spec.kind = kind;
  spec.logical_shape = p.logical_shape;
  spec.axis = p.replicated() ? 0 : p.shard_axis;
  spec.index = slice_ids(p, g, units);
  return spec;
}

// GPT-2's keys are the ones checkpoints had before other families existed (no "family" key: a
// GPT-2 checkpoint's model_config is unchanged); other families add theirs.
nlohmann::json model_json(const model::ModelConfig& m) {
  nlohmann::json j = {{"n_layer", m.n_layer},  {"n_head", m.n_head}, {"n_embd", m.n_embd},
                      {"n_ffn", m.n_ffn},      {"n_ctx", m.n_ctx},   {"vocab_size", m.vocab_size},
                      {"ffn_unit", m.ffn_unit}};
  if (m.family != model::ModelFamily::kGpt2) {
    j["family"] = model::model_family_name(m.family);
    j["n_kv_head"] = m.n_kv_head;
    j["head_dim"] = m.head_dim;
    j["rms_norm_eps"] = m.rms_norm_eps;
    j["rope_theta"] = m.rope_theta;
  }
  if (m.family == model::ModelFamily::kMoe) {
    j["n_experts"] = m.n_experts;
    j["top_k"] = m.top_k;
    j["n_shared_experts"] = m.n_shared_experts;
    j["router_aux_loss_coef"] = m.router_aux_loss_coef;
  }
  return j;
}

// Gathers every rank's string to every rank.
Result<std::vector<std::string>> all_gather_strings(comm::Communicator& world,
                                                    const std::string& mine) {
  const std::vector<uint8_t> bytes(mine.begin(), mine.end());
  NTP_ASSIGN_OR_RETURN(std::vector<std::vector<uint8_t>> all,
                       comm::allgather_varying(world, std::span<const uint8_t>(bytes)));
  std::vector<std::string> out;
  for (const std::vector<uint8_t>& r : all) out.emplace_back(r.begin(), r.end());
  return out;
}

// Calls fn(param, units, chunk, begin, n) for every block of this worker's owned ZeRO-1 chunks
// (none with the replicated optimizer): the block's units of param are elements [begin, begin +
// n) of the chunk's state.
template <typename Fn>
Status for_each_owned_block(WorkerState& s, Fn&& fn) {
  if (s.sharded == nullptr) return ok_status();
  const std::vector<OwnedChunk>& chunks = s.sync->owned_chunks();
  for (size_t c = 0; c < chunks.size(); ++c) {
    const auto& blocks = chunks[c].layout.blocks();
    for (size_t b = 0; b < blocks.size(); ++b) {
      const int64_t begin = blocks[b].offset;
      const auto n = static_cast<size_t>(chunks[c].layout.block_end(b) - begin);
      const model::Param& p = s.params[static_cast<size_t>(blocks[b].param)];
      NTP_RETURN_IF_ERROR(fn(p, blocks[b].units, c, begin, n));
    }
  }
  return ok_status();
}

}  // namespace

int64_t WorkerState::optimizer_steps() const {
  return adamw != nullptr ? adamw->steps_taken() : sharded->steps_taken();
}

std::vector<checkpoint::PieceView> checkpoint_pieces(WorkerState& s,
                                                     const checkpoint::SpreadOptions& spread) {
  std::vector<checkpoint::PieceView> out;
  const checkpoint::SpreadSlot slot{s.role.replica, s.role.tp_rank, s.role.replica_degrees};
  auto add = [&](const model::Param& p, const char* kind, std::span<const float> data) {
    for (checkpoint::PieceView& v : checkpoint::spread_param_views(p, kind, data, slot, spread)) {
      out.push_back(std::move(v));
    }
  };
  for (size_t i = 0; i < s.params.size(); ++i) {
    const model::Param& p = s.params[i];
    add(p, "value", p.value.span());
    if (s.adamw == nullptr) continue;
    add(p, kMoments[0], s.adamw->exp_avg(i));
    add(p, kMoments[1], s.adamw->exp_avg_sq(i));
  }
  (void)for_each_owned_block(s,
                             [&](const model::Param& p, const shard::IntervalSet& units,
                                 size_t chunk, int64_t begin, size_t n) -> Status {
                               for (int k = 0; k < 2; ++k) {
                                 const std::vector<float>& state =
                                     k == 0 ? s.sharded->exp_avg(chunk)
                                            : s.sharded->exp_avg_sq(chunk);
                                 out.push_back({block_piece(p, units, kMoments[k]),
                                                std::span<const float>(state.data() + begin, n)});
                               }
                               return ok_status();
                             });
  return out;
}

checkpoint::CheckpointMeta checkpoint_meta(const TrainConfig& c, int64_t step,
                                           int64_t optimizer_steps,
                                           const std::vector<shard::SlotRef>& failed_slots) {
  checkpoint::CheckpointMeta meta;
  meta.step = step;
  meta.model_config = model_json(c.model);
  meta.train_config = {{"lr", c.lr},
                       {"min_lr", c.min_lr},
                       {"warmup", c.warmup},
                       {"steps", c.steps},
                       {"beta1", c.beta1},
                       {"beta2", c.beta2},
                       {"eps", c.eps},
                       {"weight_decay", c.weight_decay},
                       {"grad_clip", c.grad_clip},
                       {"global_batch", c.global_batch()},
                       {"micro_batch", c.micro_batch},
                       {"optimizer_steps", optimizer_steps}};
  meta.data = {
      {"next_step", step}, {"train_data", c.train_data}, {"global_batch", c.global_batch()}};
  meta.rng = {{"init_seed", c.seed}, {"data_seed", c.data_seed}};
  std::vector<std::string> failed;
  for (const shard::SlotRef& f : failed_slots) {
    failed.push_back(std::to_string(f.domain) + ":" + std::to_string(f.slot));
  }
  meta.layout = {{"domains", c.domains},
                 {"tp", c.tp},
                 {"failed", failed},
                 {"strategy", c.strategy},
                 {"optimizer", optimizer_sharding_name(c.optimizer)}};
  return meta;
}

Status load_values(const PieceRead& read, WorkerState& s) {
  for (model::Param& p : s.params) {
    NTP_RETURN_IF_ERROR(read(checkpoint::param_piece(p, "value"), p.value.span()));
  }
  return for_each_owned_block(s,
                              [&](const model::Param& p, const shard::IntervalSet& units,
                                  size_t chunk, int64_t begin, size_t n) -> Status {
                                return read(
                                    block_piece(p, units, "value"),
                                    std::span<float>(s.sharded->master(chunk).data() + begin, n));
                              });
}

Result<int64_t> load_checkpoint(const checkpoint::CheckpointReader& reader, const TrainConfig& c,
                                WorkerState& s) {
  const checkpoint::Manifest& manifest = reader.manifest();
  const std::string family = manifest.meta.model_config.value("family", std::string("gpt2"));
  if (family != model::model_family_name(c.model.family)) {
    return invalid_argument("--resume " + reader.step_dir().string() +
                            ": the checkpoint's model is " + family + " but this run's is " +
                            model::model_family_name(c.model.family) + "; resume with --model " +
                            family);
  }
  const nlohmann::json want = model_json(c.model);
  for (const auto& [key, value] : want.items()) {
    if (!manifest.meta.model_config.contains(key) || manifest.meta.model_config[key] != value) {
      return invalid_argument(
          "--resume " + reader.step_dir().string() + ": the checkpoint's model " + key + " is " +
          manifest.meta.model_config.value(key, nlohmann::json()).dump() + " but this run's is " +
          value.dump() + "; resume with the model flags it was written with");
    }
  }
  // One pass: every stored chunk this worker needs is read and CRC-checked once
  // (CheckpointReader::read_all); the values as load_values names them, then the moments.
  std::vector<checkpoint::CheckpointReader::Request> requests;
  NTP_RETURN_IF_ERROR(load_values(
      [&requests](const checkpoint::PieceSpec& piece, std::span<float> out) {
        requests.push_back({piece, out});
        return ok_status();
      },
      s));
  if (s.adamw != nullptr) {
    for (size_t i = 0; i < s.params.size(); ++i) {
      const model::Param& p = s.params[i];
      requests.push_back({checkpoint::param_piece(p, kMoments[0]), s.adamw->exp_avg(i)});
      requests.push_back({checkpoint::param_piece(p, kMoments[1]), s.adamw->exp_avg_sq(i)});
    }
  }
  NTP_RETURN_IF_ERROR(for_each_owned_block(
      s,
      [&](const model::Param& p, const shard::IntervalSet& units, size_t chunk, int64_t begin,
          size_t n) -> Status {
        requests.push_back({block_piece(p, units, kMoments[0]),
                            std::span<float>(s.sharded->exp_avg(chunk).data() + begin, n)});
        requests.push_back({block_piece(p, units, kMoments[1]),
                            std::span<float>(s.sharded->exp_avg_sq(chunk).data() + begin, n)});
        return ok_status();
      }));
  NTP_RETURN_IF_ERROR(reader.read_all(requests));
  const int64_t optimizer_steps = manifest.meta.train_config.value("optimizer_steps", int64_t{0});
  if (s.adamw != nullptr) s.adamw->set_steps_taken(optimizer_steps);
  if (s.sharded != nullptr) s.sharded->set_steps_taken(optimizer_steps);
  return manifest.meta.step;
}

CheckpointSaver::CheckpointSaver(std::string save_dir, int keep_last, std::string writer)
    : save_dir_(std::move(save_dir)), keep_last_(keep_last), writer_(std::move(writer)) {}

Status CheckpointSaver::start(checkpoint::CheckpointMeta meta,
                              std::span<const checkpoint::PieceView> pieces) {
  const auto t0 = std::chrono::steady_clock::now();
  const int64_t step = meta.step;
  pending_ = std::move(meta);
  wrote_ = !pieces.empty();
  if (wrote_) {
    NTP_ASSIGN_OR_RETURN(std::filesystem::path dir, checkpoint::prepare_step_dir(save_dir_, step));
    // Reuses the memory of the previous save's snapshot (one snapshot's worth, not one per save).
    NTP_ASSIGN_OR_RETURN(checkpoint::Snapshot snapshot, writer_thread_.snapshot(pieces));
    writer_thread_.start(dir, writer_, std::move(snapshot));
  }
  last_blocked_s_ = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return ok_status();
}

void CheckpointSaver::abandon() {
  if (!pending_) return;
  pending_.reset();
  if (wrote_) (void)writer_thread_.wait();
}

Result<std::string> CheckpointSaver::finish(comm::Communicator& world) {
  if (!pending_) return std::string();
  checkpoint::CheckpointMeta meta = std::move(*pending_);
  pending_.reset();
  std::string mine;
  if (wrote_) {
    NTP_ASSIGN_OR_RETURN(checkpoint::ShardRecord record, writer_thread_.wait());
    mine = checkpoint::shard_record_to_string(record);
  }
  NTP_ASSIGN_OR_RETURN(std::vector<std::string> all, all_gather_strings(world, mine));
  if (world.rank() != 0) return std::string();
  std::vector<checkpoint::ShardRecord> records;
  for (const std::string& text : all) {
    if (text.empty()) continue;
    NTP_ASSIGN_OR_RETURN(checkpoint::ShardRecord r, checkpoint::shard_record_from_string(text));
    records.push_back(std::move(r));
  }
  const int64_t step = meta.step;
  NTP_RETURN_IF_ERROR(
      checkpoint::commit_checkpoint(save_dir_, std::move(meta), records, {.keep_last = keep_last_})
          .status());
  return checkpoint::step_dir_path(save_dir_, step).string();
}

}  // namespace ntp::train
