#include "checkpoint/manifest.h"

#include <algorithm>
#include <map>
#include <set>

#include "checkpoint/coverage.h"

namespace ntp::checkpoint {
namespace {

using nlohmann::json;

Status check_meta(const CheckpointMeta& meta) {
  if (meta.step < 0) return invalid_argument("manifest: step must be >= 0");
  const std::pair<const char*, const json*> objects[] = {{"model_config", &meta.model_config},
                                                         {"train_config", &meta.train_config},
                                                         {"data", &meta.data},
                                                         {"rng", &meta.rng},
                                                         {"layout", &meta.layout}};
  for (const auto& [name, value] : objects) {
    if (!value->is_object()) {
      return invalid_argument(std::string("manifest: '") + name + "' must be a JSON object");
    }
  }
  return ok_status();
}

}  // namespace

const TensorInfo* Manifest::find_tensor(std::string_view name) const {
  auto it = std::lower_bound(tensors.begin(), tensors.end(), name,
                             [](const TensorInfo& t, std::string_view n) { return t.name < n; });
  return it != tensors.end() && it->name == name ? &*it : nullptr;
}

std::vector<std::string> Manifest::files() const {
  std::vector<std::string> out;
  for (const PieceRecord& p : pieces) {
    if (std::find(out.begin(), out.end(), p.file) == out.end()) out.push_back(p.file);
  }
  return out;
}

namespace {

// build_manifest; `specs_validated` skips validate_piece_spec (parse_manifest already ran it).
Result<Manifest> assemble(CheckpointMeta meta, const std::vector<ShardRecord>& shards,
                          bool specs_validated) {
  NTP_RETURN_IF_ERROR(check_meta(meta));
  Manifest m;
  m.meta = std::move(meta);
  std::set<std::pair<std::string, std::string>> keys;
  std::map<std::string, std::vector<int64_t>> shapes;
  for (const ShardRecord& shard : shards) {
    for (const PieceRecord& p : shard.pieces) {
      if (!specs_validated) NTP_RETURN_IF_ERROR(validate_piece_spec(p.spec));
      if (!keys.emplace(p.file, p.key).second) {
        return invalid_argument("manifest: two pieces share key '" + p.key + "' of file " + p.file);
      }
      shapes.emplace(p.spec.tensor, p.spec.logical_shape);
      m.pieces.push_back(p);
    }
  }
  NTP_RETURN_IF_ERROR(check_coverage(m.pieces));
  for (const auto& [name, shape] : shapes) m.tensors.push_back({name, shape, "F32"});
  return m;
}

}  // namespace

Result<Manifest> build_manifest(CheckpointMeta meta, const std::vector<ShardRecord>& shards) {
  return assemble(std::move(meta), shards, /*specs_validated=*/false);
}

json meta_to_json(const CheckpointMeta& meta) {
  return json{{"step", meta.step},
              {"model_config", meta.model_config},
              {"train_config", meta.train_config},
              {"data", meta.data},
              {"rng", meta.rng},
              {"layout", meta.layout}};
}

std::string manifest_to_string(const Manifest& m) {
  // Hand-assembled so that each piece stays on one line: readable and diffable.
  json tensors = json::array();
  for (const TensorInfo& t : m.tensors) {
    tensors.push_back({{"name", t.name}, {"shape", t.shape}, {"dtype", t.dtype}});
  }
  json head = {{"format", kManifestFormat}, {"version", kManifestVersion}};
  head.update(meta_to_json(m.meta));
  head["tensors"] = tensors;
  std::string text = head.dump(1);
  text.pop_back();  // the closing '}'
  while (!text.empty() && text.back() == '\n') text.pop_back();
  text += ",\n \"pieces\": [";
  for (size_t i = 0; i < m.pieces.size(); ++i) {
    text += (i == 0 ? "\n  " : ",\n  ") + piece_record_to_json(m.pieces[i]).dump();
  }
  text += "\n ]\n}\n";
  return text;
}

Result<Manifest> parse_manifest(std::string_view text) {
  const json j = json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) return invalid_argument("manifest is not a JSON object");
  if (!j.contains("format") || j["format"] != kManifestFormat) {
    return invalid_argument("manifest: 'format' is not \"ntp-checkpoint\"");
  }
  if (!j.contains("version") || j["version"] != kManifestVersion) {
    return invalid_argument("manifest: unsupported 'version' (this build reads version 1)");
  }
  if (!j.contains("step") || !j["step"].is_number_unsigned() ||
      j["step"].get<uint64_t>() > 99999999u) {
    return invalid_argument("manifest: 'step' must be an integer in [0, 99999999]");
  }
  CheckpointMeta meta;
  meta.step = j["step"].get<int64_t>();
  for (auto [name, field] : {std::pair{"model_config", &meta.model_config},
                             {"train_config", &meta.train_config},
                             {"data", &meta.data},
                             {"rng", &meta.rng},
                             {"layout", &meta.layout}}) {
    if (!j.contains(name)) return invalid_argument(std::string("manifest: '") + name + "' missing");
    *field = j[name];
  }
  if (!j.contains("pieces") || !j["pieces"].is_array()) {
    return invalid_argument("manifest: 'pieces' must be an array");
  }
  if (!j.contains("tensors") || !j["tensors"].is_array()) {
    return invalid_argument("manifest: 'tensors' must be an array");
  }
  ShardRecord all;
  for (const json& p : j["pieces"]) {
    Result<PieceRecord> piece = piece_record_from_json(p);
    if (!piece.ok()) return piece.status().with_context("manifest");
    all.pieces.push_back(std::move(piece).value());
  }
  NTP_ASSIGN_OR_RETURN(Manifest m, assemble(std::move(meta), {all}, /*specs_validated=*/true));
  // The listed tensors must be exactly those the pieces hold.
  std::set<std::string> listed;
  for (const json& t : j["tensors"]) {
    if (!t.is_object() || !t.contains("name") || !t["name"].is_string() || !t.contains("shape") ||
        !t["shape"].is_array() || !t.contains("dtype") || t["dtype"] != "F32") {
      return invalid_argument("manifest: each tensor needs a name, a shape and dtype \"F32\"");
    }
    const TensorInfo* held = m.find_tensor(t["name"].get<std::string>());
    if (held == nullptr) {
      return invalid_argument("manifest: tensor " + t["name"].get<std::string>() +
                              " is listed but no piece holds it");
    }
    if (json(held->shape) != t["shape"]) {
      return invalid_argument("manifest: tensor " + held->name +
                              " is listed with a shape its pieces do not have");
    }
    if (!listed.insert(held->name).second) {
      return invalid_argument("manifest: tensor " + held->name + " is listed twice");
    }
  }
  if (listed.size() != m.tensors.size()) {
    return invalid_argument("manifest: 'tensors' does not list every tensor of 'pieces' once");
  }
  return m;
}

}  // namespace ntp::checkpoint
