#include "train/weight_source.h"

#include <algorithm>
#include <filesystem>
#include <memory>
#include <numeric>

#include "checkpoint/hf_import.h"
#include "checkpoint/model_pieces.h"
#include "checkpoint/reader.h"
#include "shard/unit_space.h"
#include "train/worker_role.h"

namespace ntp::train {
namespace {

using nlohmann::json;

Status read_int(const json& j, const char* key, int64_t& field, bool required) {
  if (!j.contains(key)) {
    if (!required) return ok_status();
    return invalid_argument(std::string("model_config.") + key + " is missing");
  }
  if (!j[key].is_number_integer()) {
    return invalid_argument(std::string("model_config.") + key + " is " + j[key].dump() +
                            "; it must be an integer");
  }
  field = j[key].get<int64_t>();
  return ok_status();
}

// Optional: an absent key leaves `field` as it is.
Status read_number(const json& j, const char* key, double& field) {
  if (!j.contains(key)) return ok_status();
  if (!j[key].is_number()) {
    return invalid_argument(std::string("model_config.") + key + " is " + j[key].dump() +
                            "; it must be a number");
  }
  field = j[key].get<double>();
  return ok_status();
}

}  // namespace

Result<model::ModelConfig> model_config_from_json(const json& j) {
  if (!j.is_object()) return invalid_argument("model_config must be a JSON object");
  model::ModelConfig m;
  const json family = j.value("family", json(model::model_family_name(m.family)));
  Result<model::ModelFamily> parsed = family.is_string()
                                          ? model::parse_model_family(family.get<std::string>())
                                          : invalid_argument("");
  if (!parsed.ok()) {
    return invalid_argument("model_config.family " + family.dump() +
                            " is unknown (gpt2, llama, moe)");
  }
  m.family = *parsed;
  for (const auto& [key, field] :
       {std::pair{"n_layer", &m.n_layer}, std::pair{"n_head", &m.n_head},
        std::pair{"n_embd", &m.n_embd}, std::pair{"n_ffn", &m.n_ffn}, std::pair{"n_ctx", &m.n_ctx},
        std::pair{"vocab_size", &m.vocab_size}}) {
    NTP_RETURN_IF_ERROR(read_int(j, key, *field, /*required=*/true));
  }
  m.ffn_unit = 1;
  NTP_RETURN_IF_ERROR(read_int(j, "ffn_unit", m.ffn_unit, /*required=*/false));
  // The fields only some families have (absent: ModelConfig's defaults, which validate() wants
  // for a family without them).
  NTP_RETURN_IF_ERROR(read_int(j, "n_kv_head", m.n_kv_head, /*required=*/false));
  NTP_RETURN_IF_ERROR(read_int(j, "head_dim", m.head_dim, /*required=*/false));
  NTP_RETURN_IF_ERROR(read_number(j, "rms_norm_eps", m.rms_norm_eps));
  NTP_RETURN_IF_ERROR(read_number(j, "rope_theta", m.rope_theta));
  NTP_RETURN_IF_ERROR(read_int(j, "n_experts", m.n_experts, /*required=*/false));
  NTP_RETURN_IF_ERROR(read_int(j, "top_k", m.top_k, /*required=*/false));
  NTP_RETURN_IF_ERROR(read_int(j, "n_shared_experts", m.n_shared_experts, /*required=*/false));
  NTP_RETURN_IF_ERROR(read_number(j, "router_aux_loss_coef", m.router_aux_loss_coef));
  NTP_RETURN_IF_ERROR(m.validate());
  return m;
}

namespace {

Result<WeightSource> open_source(const std::string& path) {
  WeightSource source;
  if (checkpoint::HfModel::is_hf_dir(path)) {
    NTP_ASSIGN_OR_RETURN(checkpoint::HfModel hf, checkpoint::HfModel::open(path));
    Result<model::ModelConfig> config = model_config_from_json(hf.model_config());
    if (!config.ok()) {
      return invalid_argument(path + "/config.json: " + config.status().message());
    }
    source.dir = path;
    source.hugging_face = true;
    source.config = *config;
    auto shared = std::make_shared<checkpoint::HfModel>(std::move(hf));
    source.read = [shared](const checkpoint::PieceSpec& piece, std::span<float> out) {
      return shared->read(piece, out);
    };
    return source;
  }
  NTP_ASSIGN_OR_RETURN(checkpoint::CheckpointReader reader,
                       checkpoint::CheckpointReader::open(path));
  const std::string manifest = (reader.step_dir() / "manifest.json").string();
  Result<model::ModelConfig> config = model_config_from_json(reader.manifest().meta.model_config);
  if (!config.ok()) return invalid_argument(manifest + ": " + config.status().message());
  source.dir = reader.step_dir().string();
  source.step = reader.manifest().meta.step;
  source.config = *config;
  auto shared = std::make_shared<checkpoint::CheckpointReader>(std::move(reader));
  source.read = [shared](const checkpoint::PieceSpec& piece, std::span<float> out) {
    return shared->read(piece, out);
  };
  return source;
}

}  // namespace

Result<WeightSource> open_weight_source(const std::string& path) {
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) {
    return invalid_argument(path +
                            " does not exist; give an ntp checkpoint (a step or save directory) "
                            "or a Hugging Face directory (config.json + model.safetensors)");
  }
  Result<WeightSource> source = open_source(path);
  // A missing directory or file is the user's to fix, like bad content.
  if (source.status().code() == StatusCode::kNotFound) {
    return invalid_argument(source.status().message());
  }
  return source;
}

namespace {

// The model flags of `ntp train` and their values (0-means-default flags resolved).
std::vector<std::pair<std::string, json>> model_flag_values(const model::ModelConfig& m) {
  return {{"--model", model::model_family_name(m.family)},
          {"--layers", m.n_layer},
          {"--heads", m.n_head},
          {"--kv-heads", m.grouped_kv_heads()},
          {"--width", m.n_embd},
          {"--context", m.n_ctx},
          {"--ffn", m.ffn()},
          {"--rope-theta", m.rope_theta},
          {"--experts", m.n_experts},
          {"--top-k", m.top_k},
          {"--shared-experts", m.n_shared_experts},
          {"--router-aux-coef", m.router_aux_loss_coef}};
}

}  // namespace

Status adopt_source_model(model::ModelConfig& config, const WeightSource& source,
                          const std::vector<std::string>& given) {
  const auto mine = model_flag_values(config);
  const auto theirs = model_flag_values(source.config);
  for (size_t i = 0; i < mine.size(); ++i) {
    const std::string& flag = mine[i].first;
    if (std::find(given.begin(), given.end(), flag) == given.end()) continue;
    if (mine[i].second == theirs[i].second) continue;
    return invalid_argument(flag + " " + mine[i].second.dump() + " conflicts with --init-from " +
                            source.dir + ", whose model has " + flag + " " +
                            theirs[i].second.dump() + "; drop " + flag +
                            " (the model comes from the source)");
  }
  const int64_t ffn_unit = config.ffn_unit;
  config = source.config;
  config.ffn_unit = ffn_unit;
  return ok_status();
}

Status read_param_values(const WeightSource& source, std::span<model::Param> params) {
  for (model::Param& p : params) {
    NTP_RETURN_IF_ERROR(source.read(checkpoint::param_piece(p, "value"), p.value.span()));
  }
  return ok_status();
}

}  // namespace ntp::train

namespace ntp::train {

model::ModelShard one_rank_shard(const model::ModelConfig& config, bool whole) {
  model::ModelShard shard;
  const std::vector<shard::UnitSpace> spaces = shard::model_unit_spaces(model_shape(config));
  for (size_t s = 0; s < spaces.size(); ++s) {
    if (spaces[s].derived()) continue;  // follows from the query heads (model/llama_shard.h)
    std::vector<int64_t>& ids = shard.units(static_cast<model::UnitSpaceId>(s));
    ids.resize(whole ? static_cast<size_t>(spaces[s].units) : 1);
    std::iota(ids.begin(), ids.end(), int64_t{0});
  }
  return shard;
}

Status check_weight_source(const WeightSource& source, const model::ModelConfig& config) {
  NTP_ASSIGN_OR_RETURN(std::unique_ptr<model::Model> m,
                       model::create_model(config, one_rank_shard(config, /*whole=*/false),
                                           /*seed=*/0, /*group=*/nullptr, /*initialize=*/false));
  return read_param_values(source, m->params());
}

}  // namespace ntp::train
