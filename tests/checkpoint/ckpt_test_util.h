// Shared by the checkpoint tests and the fixture program: checkpoints written from the ranks of
// a real GptModel replica, so that every layout the trainer can produce is exercised.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "checkpoint/manifest.h"
#include "checkpoint/shard_writer.h"
#include "model/gpt_model.h"

namespace ntp::checkpoint::testing {

// The whole content of a file ("" if it cannot be read).
std::string read_all(const std::filesystem::path& path);

// tests/common/model_shapes.h's tiny_gpt with vocabulary 260 (256 bytes + padding).
model::GptConfig tiny_config();
nlohmann::json model_config_json(const model::GptConfig& config);

// The `degree` ranks of one replica (layout_seed 0: contiguous_layout, else shuffled_layout),
// weights from `init_seed` (layout-independent, model/init.h).
std::vector<model::GptModel> make_ranks(const model::GptConfig& config, int degree,
                                        uint64_t layout_seed, uint64_t init_seed = 7);

// The optimizer moments the tests store, as functions of the weight (layout-independent).
float fake_exp_avg(float value);
float fake_exp_avg_sq(float value);

struct SaveSpec {
  int64_t step = 1;
  bool moments = true;  // also store exp_avg and exp_avg_sq
  // Replicated tensors: false = rank 0 writes them whole; true = split into row ranges along
  // axis 0 over the ranks (as a DP-sharded optimizer would).
  bool split_replicated = false;
  int keep_last = 0;
  ShardWriteOptions write_options;
};

// Writes each rank as writer "<rank>" (synchronously) and commits the checkpoint.
Result<Manifest> save_ranks(const std::filesystem::path& save_dir,
                            const std::vector<model::GptModel>& ranks, const SaveSpec& spec);

// The data of every piece rank `rank` writes under `spec` (owned, alongside their views).
struct RankPieces {
  std::vector<std::vector<float>> data;
  std::vector<PieceView> views;
};
RankPieces rank_pieces(const std::vector<model::GptModel>& ranks, size_t rank,
                       const SaveSpec& spec);

}  // namespace ntp::checkpoint::testing
