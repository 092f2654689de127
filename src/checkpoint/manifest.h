// The manifest of a checkpoint (manifest.json in the step directory; schema in
// docs/checkpoint.md): format "ntp-checkpoint", version 1, the step, the trainer's opaque JSON
// objects, the logical tensors and every piece with its file, key, index runs and chunk CRCs.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "checkpoint/records.h"
#include "core/status.h"

namespace ntp::checkpoint {

inline constexpr std::string_view kManifestFormat = "ntp-checkpoint";
inline constexpr int kManifestVersion = 1;

// What the trainer stores besides tensors; each JSON value must be an object (opaque here).
struct CheckpointMeta {
  int64_t step = 0;
  nlohmann::json model_config = nlohmann::json::object();  // n_layer, n_head, n_embd, n_ffn, ...
  nlohmann::json train_config = nlohmann::json::object();
  nlohmann::json data = nlohmann::json::object();  // data loader position
  nlohmann::json rng = nlohmann::json::object();
  nlohmann::json layout = nlohmann::json::object();  // the layout the pieces were written at
};

struct TensorInfo {
  std::string name;
  std::vector<int64_t> shape;
  std::string dtype = "F32";
};

struct Manifest {
  CheckpointMeta meta;
  std::vector<TensorInfo> tensors;  // sorted by name
  std::vector<PieceRecord> pieces;  // in the order the writers reported them

  const TensorInfo* find_tensor(std::string_view name) const;
  // Writer files in first-use order.
  std::vector<std::string> files() const;
};

// Builds the manifest of `meta` and every writer's record: derives the tensor list and checks
// coverage (coverage.h) and that no two pieces share a (file, key). kInvalidArgument otherwise.
Result<Manifest> build_manifest(CheckpointMeta meta, const std::vector<ShardRecord>& shards);

// {"step", "model_config", "train_config", "data", "rng", "layout"}: the manifest's meta fields
// (also what `ntp ckpt inspect --json` reports).
nlohmann::json meta_to_json(const CheckpointMeta& meta);

std::string manifest_to_string(const Manifest& manifest);  // pretty JSON, 1 line per piece
// Strict parse plus build_manifest's checks; kInvalidArgument naming the field or tensor. The
// text manifest_to_string writes takes a fast path (manifest_scan.h: no JSON DOM for the
// pieces); any other text, and every error, goes through parse_manifest_dom.
Result<Manifest> parse_manifest(std::string_view text);
// The general parser (a JSON DOM of the whole text): parse_manifest's result for any text.
Result<Manifest> parse_manifest_dom(std::string_view text);

}  // namespace ntp::checkpoint
