// Where `ntp eval` and `ntp train --init-from` take a model's weights from: an ntp checkpoint (a
// step or save directory, written at any layout) or a Hugging Face directory (config.json +
// model.safetensors, checkpoint/hf_import.h). Either gives the model's config and reads any piece
// of its logical "value" tensors, so any layout loads exactly its own slices.
#pragma once

#include <functional>
#include <nlohmann/json.hpp>
#include <span>
#include <string>
#include <vector>

#include "checkpoint/piece.h"
#include "core/status.h"
#include "model/model_config.h"
#include "model/model_factory.h"
#include "model/param.h"

namespace ntp::train {

struct WeightSource {
  std::string dir;            // the step directory or the Hugging Face directory (for messages)
  bool hugging_face = false;  // a Hugging Face directory (else an ntp checkpoint)
  int64_t step = 0;           // an ntp checkpoint's step (0 for Hugging Face)
  model::ModelConfig config;  // ffn_unit as the checkpoint has it (1 for Hugging Face)
  std::function<Status(const checkpoint::PieceSpec&, std::span<float>)> read;
};

// A directory with config.json and model.safetensors is read as Hugging Face, anything else as
// an ntp checkpoint. Errors (kInvalidArgument for bad content) name the file and what is wrong.
Result<WeightSource> open_weight_source(const std::string& path);

// The ModelConfig of a manifest-form model_config (what checkpoints store, and what
// checkpoint::model_config_from_hf returns); ffn_unit 1 when absent. kInvalidArgument naming the
// field.
Result<model::ModelConfig> model_config_from_json(const nlohmann::json& model_config);

// `ntp train --init-from`: the run's model becomes the source's, every field but ffn_unit (a TP
// granularity, not part of the weights, which stays config's). `given` lists the model flags the
// user set, with the value they set (--model, --layers, --heads, --kv-heads, --width, --context,
// --ffn, --rope-theta as model_flag_values writes them): one that differs from the source's is
// kInvalidArgument naming both values.
Status adopt_source_model(model::ModelConfig& config, const WeightSource& source,
                          const std::vector<std::string>& given);

// The units of one rank of a model of `config`: every unit of every space (`whole`, a model in one
// process) or the first unit of each (a small model whose params still name every logical tensor
// with its full logical shape).
model::ModelShard one_rank_shard(const model::ModelConfig& config, bool whole);

// Checks before a job starts that `source` holds every logical tensor a model of `config` needs,
// with its shape, by reading them into a model of one_rank_shard(config, false): the errors
// read_param_values would give on any rank, at little memory.
Status check_weight_source(const WeightSource& source, const model::ModelConfig& config);

// Reads every param's local value (its own slices, copies of shared units included).
Status read_param_values(const WeightSource& source, std::span<model::Param> params);

}  // namespace ntp::train
