#include "cli/ckpt_inspect.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <map>
#include <set>
#include <sstream>

namespace ntp::cli {
namespace {

using nlohmann::json;

std::string shape_text(const json& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i)
    s += (i ? ", " : "") + std::to_string(shape[i].get<int64_t>());
  return s + "]";
}

std::string compact(const json& value, size_t limit) {
  std::string s = value.dump();
  if (s.size() > limit) s = s.substr(0, limit - 3) + "...";
  return s;
}

}  // namespace

json inspect_json(const checkpoint::CheckpointReader& reader) {
  const checkpoint::Manifest& m = reader.manifest();
  json files = json::array();
  for (const std::string& file : m.files()) {
    std::error_code ec;
    const auto bytes = std::filesystem::file_size(reader.step_dir() / file, ec);
    const auto pieces =
        std::count_if(m.pieces.begin(), m.pieces.end(),
                      [&](const checkpoint::PieceRecord& p) { return p.file == file; });
    files.push_back({{"file", file},
                     {"writer", file.substr(6, file.size() - 6 - 12)},
                     {"bytes", ec ? 0 : bytes},
                     {"pieces", pieces}});
  }
  json tensors = json::array();
  for (const checkpoint::TensorInfo& t : m.tensors) {
    json kinds = json::object();
    for (const checkpoint::PieceRecord& p : m.pieces) {
      if (p.spec.tensor != t.name) continue;
      json& k = kinds[p.spec.kind];
      if (!k.contains("pieces")) k = {{"axis", p.spec.axis}, {"pieces", json::array()}};
      if (p.spec.axis >= 0) k["axis"] = p.spec.axis;
      json runs = json::array();
      for (const auto& [b, e] : checkpoint::index_to_runs(p.spec.index)) runs.push_back({b, e});
      k["pieces"].push_back({{"file", p.file}, {"index", runs}});
    }
    tensors.push_back({{"name", t.name}, {"shape", t.shape}, {"kinds", kinds}});
  }
  json summary = checkpoint::meta_to_json(m.meta);
  summary["dir"] = reader.step_dir().string();
  summary["files"] = files;
  summary["tensors"] = tensors;
  return summary;
}

std::string render_inspect_text(const json& s) {
  std::ostringstream out;
  int64_t total_bytes = 0, pieces = 0;
  for (const json& f : s["files"]) {
    total_bytes += f["bytes"].get<int64_t>();
    pieces += f["pieces"].get<int64_t>();
  }
  std::set<std::string> kinds;
  for (const json& t : s["tensors"]) {
    for (const auto& [kind, _] : t["kinds"].items()) kinds.insert(kind);
  }
  out << "checkpoint " << s["dir"].get<std::string>() << " (step " << s["step"] << ")\n";
  out << "tensors: " << s["tensors"].size() << ", pieces: " << pieces << ", kinds:";
  for (const std::string& k : kinds) out << " " << k;
  out << "\n";
  out << "writers: " << s["files"].size() << " (" << total_bytes << " bytes)\n";
  for (const json& f : s["files"]) {
    out << "  " << f["writer"].get<std::string>() << "  " << f["file"].get<std::string>() << "  "
        << f["bytes"] << " bytes, " << f["pieces"] << " pieces\n";
  }
  out << "model_config: " << compact(s["model_config"], 160) << "\n";
  out << "layout: " << compact(s["layout"], 160) << "\n";
  out << "data: " << compact(s["data"], 160) << "\n";
  char line[256];
  std::snprintf(line, sizeof(line), "%-40s %-14s %-11s %5s %6s  %s\n", "tensor", "shape", "kind",
                "axis", "pieces", "writers");
  out << line;
  for (const json& t : s["tensors"]) {
    for (const auto& [kind, k] : t["kinds"].items()) {
      std::string writers;
      for (const json& p : k["pieces"]) {
        const std::string f = p["file"].get<std::string>();
        writers += (writers.empty() ? "" : ",") + f.substr(6, f.size() - 6 - 12);
      }
      const int axis = k["axis"].get<int>();
      std::snprintf(line, sizeof(line), "%-40s %-14s %-11s %5s %6zu  %s\n",
                    t["name"].get<std::string>().c_str(), shape_text(t["shape"]).c_str(),
                    kind.c_str(), axis < 0 ? "whole" : std::to_string(axis).c_str(),
                    k["pieces"].size(), writers.c_str());
      out << line;
    }
  }
  return out.str();
}

}  // namespace ntp::cli
