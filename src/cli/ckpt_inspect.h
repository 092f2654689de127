// What `ntp ckpt inspect` reports about a checkpoint: a JSON summary (the --json output) and its
// text rendering.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "checkpoint/reader.h"

namespace ntp::cli {

// {"dir", "step", "model_config", "train_config", "data", "rng", "layout",
//  "files": [{"file", "writer", "bytes", "pieces"}],
//  "tensors": [{"name", "shape", "kinds": {"<kind>": {"axis", "pieces": [{"file", "index"}]}}}]}
// ("index" as [begin, end) runs, empty for whole-tensor pieces; "axis" -1 for whole).
nlohmann::json inspect_json(const checkpoint::CheckpointReader& reader);

// Human-readable: header lines, then one line per tensor and kind.
std::string render_inspect_text(const nlohmann::json& summary);

}  // namespace ntp::cli
