#include "checkpoint/manifest.h"

#include <algorithm>
#include <map>
#include <optional>
#include <set>

#include "checkpoint/coverage.h"
#include "checkpoint/manifest_scan.h"

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

// build_manifest of `pieces`; `specs_validated` skips validate_piece_spec (parse_manifest already
// ran it).
Result<Manifest> assemble(CheckpointMeta meta, std::vector<PieceRecord> pieces,
                          bool specs_validated) {
  NTP_RETURN_IF_ERROR(check_meta(meta));
  Manifest m;
  m.meta = std::move(meta);
  std::set<std::pair<std::string_view, std::string_view>> keys;
  std::map<std::string_view, const std::vector<int64_t>*> shapes;
  m.pieces = std::move(pieces);
  for (const PieceRecord& p : m.pieces) {
    if (!specs_validated) NTP_RETURN_IF_ERROR(validate_piece_spec(p.spec));
    if (!keys.emplace(p.file, p.key).second) {
      return invalid_argument("manifest: two pieces share key '" + p.key + "' of file " + p.file);
    }
    shapes.emplace(p.spec.tensor, &p.spec.logical_shape);
  }
  NTP_RETURN_IF_ERROR(check_coverage(m.pieces));
  for (const auto& [name, shape] : shapes) m.tensors.push_back({std::string(name), *shape, "F32"});
  return m;
}

}  // namespace

Result<Manifest> build_manifest(CheckpointMeta meta, const std::vector<ShardRecord>& shards) {
  std::vector<PieceRecord> pieces;
  for (const ShardRecord& shard : shards) {
    pieces.insert(pieces.end(), shard.pieces.begin(), shard.pieces.end());
  }
  return assemble(std::move(meta), std::move(pieces), /*specs_validated=*/false);
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

namespace {

// The head's fields: format, version, step and the trainer's objects.
Result<CheckpointMeta> parse_head(const json& j) {
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
  return meta;
}

Status check_tensors_array(const json& j) {
  if (!j.contains("tensors") || !j["tensors"].is_array()) {
    return invalid_argument("manifest: 'tensors' must be an array");
  }
  return ok_status();
}

// The manifest of checked pieces, and its 'tensors' list checked against them.
Result<Manifest> finish_manifest(CheckpointMeta meta, std::vector<PieceRecord> pieces,
                                 const json& tensors) {
  NTP_ASSIGN_OR_RETURN(Manifest m,
                       assemble(std::move(meta), std::move(pieces), /*specs_validated=*/true));
  // The listed tensors must be exactly those the pieces hold.
  std::set<std::string> listed;
  for (const json& t : tensors) {
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

// The manifest as manifest_to_string writes it: a head object (everything but the pieces, small),
// then `,\n "pieces": [` and the pieces array last, read by scan_pieces without a DOM. nullopt for
// any other text and for any error (the caller then takes the general parser, which names it).
// The head is parsed as the text up to that marker plus '}': valid only when the marker sits at
// the top level (a raw newline cannot be inside a JSON string, and anywhere deeper the prefix
// leaves an object open), so the head, the scanned array and the closing '}' make up the whole
// text, which is then valid JSON with the same values.
std::optional<Manifest> parse_canonical(std::string_view text) {
  constexpr std::string_view kMarker = ",\n \"pieces\": [";
  const size_t at = text.find(kMarker);
  if (at == std::string_view::npos) return std::nullopt;
  std::string head_text(text.substr(0, at));
  head_text += '}';
  const json head = json::parse(head_text, nullptr, /*allow_exceptions=*/false);
  if (head.is_discarded() || !head.is_object() || head.contains("pieces")) return std::nullopt;
  Result<CheckpointMeta> meta = parse_head(head);
  if (!meta.ok() || !check_tensors_array(head).ok()) return std::nullopt;
  size_t pos = at + kMarker.size() - 1;  // the '['
  std::optional<std::vector<PieceFields>> fields = scan_pieces(text, &pos);
  if (!fields) return std::nullopt;
  const size_t close = text.find_first_not_of(" \t\n\r", pos);
  if (close == std::string_view::npos || text[close] != '}' ||
      text.find_first_not_of(" \t\n\r", close + 1) != std::string_view::npos) {
    return std::nullopt;
  }
  std::vector<PieceRecord> pieces;
  pieces.reserve(fields->size());
  for (PieceFields& f : *fields) {
    Result<PieceRecord> piece = finish_piece(std::move(f));
    if (!piece.ok()) return std::nullopt;
    pieces.push_back(std::move(piece).value());
  }
  Result<Manifest> m = finish_manifest(std::move(meta).value(), std::move(pieces), head["tensors"]);
  if (!m.ok()) return std::nullopt;
  return std::move(m).value();
}

}  // namespace

Result<Manifest> parse_manifest_dom(std::string_view text) {
  const json j = json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) return invalid_argument("manifest is not a JSON object");
  NTP_ASSIGN_OR_RETURN(CheckpointMeta meta, parse_head(j));
  if (!j.contains("pieces") || !j["pieces"].is_array()) {
    return invalid_argument("manifest: 'pieces' must be an array");
  }
  NTP_RETURN_IF_ERROR(check_tensors_array(j));
  std::vector<PieceRecord> pieces;
  for (const json& p : j["pieces"]) {
    Result<PieceRecord> piece = piece_record_from_json(p);
    if (!piece.ok()) return piece.status().with_context("manifest");
    pieces.push_back(std::move(piece).value());
  }
  return finish_manifest(std::move(meta), std::move(pieces), j["tensors"]);
}

Result<Manifest> parse_manifest(std::string_view text) {
  if (std::optional<Manifest> m = parse_canonical(text)) return std::move(*m);
  return parse_manifest_dom(text);
}

}  // namespace ntp::checkpoint
