#include "checkpoint/records.h"

#include <algorithm>

namespace ntp::checkpoint {
namespace {

using nlohmann::json;

Status field_error(const std::string& where, const std::string& what) {
  return invalid_argument(where + ": " + what);
}

Result<std::string> get_string(const json& j, const char* key, const std::string& where) {
  if (!j.contains(key) || !j[key].is_string()) {
    return field_error(where, std::string("'") + key + "' must be a string");
  }
  return j[key].get<std::string>();
}

Result<int64_t> get_int(const json& j, const char* key, const std::string& where, int64_t lo,
                        int64_t hi) {
  if (!j.contains(key) || !j[key].is_number_integer()) {
    return field_error(where, std::string("'") + key + "' must be an integer");
  }
  const auto v = j[key].get<int64_t>();
  if (j[key].is_number_unsigned() && j[key].get<uint64_t>() > static_cast<uint64_t>(hi)) {
    return field_error(where, std::string("'") + key + "' out of range");
  }
  if (v < lo || v > hi) return field_error(where, std::string("'") + key + "' out of range");
  return v;
}

Result<std::vector<int64_t>> get_shape(const json& j, const char* key, const std::string& where) {
  if (!j.contains(key) || !j[key].is_array() || j[key].size() > kMaxRank) {
    return field_error(where, std::string("'") + key + "' must be an array of at most 16 dims");
  }
  std::vector<int64_t> shape;
  for (const json& d : j[key]) {
    if (!d.is_number_unsigned() || d.get<uint64_t>() > kMaxDim) {
      return field_error(where, std::string("'") + key + "' has a bad dimension");
    }
    shape.push_back(d.get<int64_t>());
  }
  return shape;
}

// Element count with overflow detection (-1 past 2^60).
int64_t checked_numel(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) {
    if (__builtin_mul_overflow(n, d, &n) || n > (int64_t{1} << 60)) return -1;
  }
  return n;
}

}  // namespace

Status validate_writer_id(std::string_view writer) {
  const bool ok = !writer.empty() && writer.size() <= 64 &&
                  std::all_of(writer.begin(), writer.end(), [](char c) {
                    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
                           (c >= '0' && c <= '9') || c == '_' || c == '-';
                  });
  if (!ok) {
    return invalid_argument("writer id '" + std::string(writer) +
                            "' must be 1-64 characters of [A-Za-z0-9_-]");
  }
  return ok_status();
}

std::string shard_file_name(std::string_view writer) {
  return "shard_" + std::string(writer) + ".safetensors";
}

int64_t chunk_count(int64_t bytes, int64_t chunk_bytes) {
  return (bytes + chunk_bytes - 1) / chunk_bytes;
}

json piece_record_to_json(const PieceRecord& r) {
  json runs = json::array();
  for (const auto& [b, e] : index_to_runs(r.spec.index)) {
    if (e == b + 1) {
      runs.push_back(b);  // a single slice: a bare id keeps shuffled layouts' manifests small
    } else {
      runs.push_back({b, e});
    }
  }
  return json{{"tensor", r.spec.tensor},
              {"kind", r.spec.kind},
              {"file", r.file},
              {"key", r.key},
              {"logical_shape", r.spec.logical_shape},
              {"axis", r.spec.axis},
              {"index", runs},
              {"shape", local_shape(r.spec)},
              {"chunk_bytes", r.chunk_bytes},
              {"crc32c", r.crcs}};
}

Result<PieceRecord> finish_piece(PieceFields f) {
  PieceRecord& r = f.record;
  const std::vector<int64_t>& shape = f.shape;
  const std::string where = "piece of '" + r.spec.tensor + "'";
  if (r.chunk_bytes % 4 != 0) return field_error(where, "'chunk_bytes' must be a multiple of 4");
  if (r.key.empty()) return field_error(where, "'key' is empty");
  if (!r.file.starts_with("shard_") || !r.file.ends_with(".safetensors") ||
      !validate_writer_id(r.file.substr(6, r.file.size() - 6 - 12)).ok()) {
    return field_error(where, "'file' must be shard_<writer id>.safetensors");
  }
  if (shape.size() != r.spec.logical_shape.size()) {
    return field_error(where, "'shape' and 'logical_shape' differ in rank");
  }
  const int64_t numel = checked_numel(shape);
  if (numel < 0 || checked_numel(r.spec.logical_shape) < 0) {
    return field_error(where, "shape too large");
  }
  if (!f.crcs_is_array) return field_error(where, "'crc32c' must be an array");
  if (static_cast<int64_t>(f.crcs.size()) != chunk_count(numel * 4, r.chunk_bytes)) {
    return field_error(where, "'crc32c' needs one entry per chunk (" +
                                  std::to_string(chunk_count(numel * 4, r.chunk_bytes)) + ")");
  }
  r.crcs.reserve(f.crcs.size());
  for (const int64_t c : f.crcs) {
    if (c < 0) return field_error(where, "'crc32c' entries must be 32-bit unsigned integers");
    r.crcs.push_back(static_cast<uint32_t>(c));
  }
  if (!f.index_is_array) {
    return field_error(where, "'index' must be an array of [begin, end) runs");
  }
  const auto rank = static_cast<int>(shape.size());
  if (r.spec.axis >= rank) return field_error(where, "'axis' out of range");
  for (int d = 0; d < rank; ++d) {
    if (d != r.spec.axis &&
        shape[static_cast<size_t>(d)] != r.spec.logical_shape[static_cast<size_t>(d)]) {
      return field_error(where, "'shape' differs from 'logical_shape' off the axis");
    }
  }
  if (r.spec.whole()) {
    if (!f.index.empty()) return field_error(where, "a whole-tensor piece has an empty 'index'");
    return std::move(r);
  }
  const auto dim = static_cast<uint64_t>(r.spec.logical_shape[static_cast<size_t>(r.spec.axis)]);
  IndexRuns runs;
  int64_t count = 0;
  for (const RawRun& run : f.index) {
    if (run.kind == RawRun::kId && run.begin < dim) {
      runs.emplace_back(static_cast<int64_t>(run.begin), static_cast<int64_t>(run.begin) + 1);
    } else if (run.kind == RawRun::kRun && run.begin < run.end && run.end <= dim) {
      runs.emplace_back(static_cast<int64_t>(run.begin), static_cast<int64_t>(run.end));
    } else {
      return field_error(where,
                         "'index' entries must be a slice id or a [begin, end) run with "
                         "begin < end <= " +
                             std::to_string(dim));
    }
    count += runs.back().second - runs.back().first;
    if (count > shape[static_cast<size_t>(r.spec.axis)]) break;
  }
  if (count != shape[static_cast<size_t>(r.spec.axis)]) {
    return field_error(where, "'index' runs hold " + std::to_string(count) +
                                  " slices but 'shape' has " +
                                  std::to_string(shape[static_cast<size_t>(r.spec.axis)]));
  }
  r.spec.index = runs_to_index(runs);
  NTP_RETURN_IF_ERROR(validate_piece_spec(r.spec));
  return std::move(r);
}

Result<PieceRecord> piece_record_from_json(const json& j) {
  std::string where = "piece";
  if (!j.is_object()) return field_error(where, "must be an object");
  PieceFields f;
  PieceRecord& r = f.record;
  NTP_ASSIGN_OR_RETURN(r.spec.tensor, get_string(j, "tensor", where));
  where = "piece of '" + r.spec.tensor + "'";
  NTP_ASSIGN_OR_RETURN(r.spec.kind, get_string(j, "kind", where));
  NTP_ASSIGN_OR_RETURN(r.file, get_string(j, "file", where));
  NTP_ASSIGN_OR_RETURN(r.key, get_string(j, "key", where));
  NTP_ASSIGN_OR_RETURN(r.spec.logical_shape, get_shape(j, "logical_shape", where));
  NTP_ASSIGN_OR_RETURN(const int64_t axis, get_int(j, "axis", where, -1, 15));
  r.spec.axis = static_cast<int>(axis);
  NTP_ASSIGN_OR_RETURN(f.shape, get_shape(j, "shape", where));
  NTP_ASSIGN_OR_RETURN(r.chunk_bytes, get_int(j, "chunk_bytes", where, 4, kMaxChunkBytes));
  f.crcs_is_array = j.contains("crc32c") && j["crc32c"].is_array();
  if (f.crcs_is_array) {
    for (const json& c : j["crc32c"]) {
      const bool ok = c.is_number_unsigned() && c.get<uint64_t>() <= 0xFFFFFFFFu;
      f.crcs.push_back(ok ? c.get<int64_t>() : -1);
    }
  }
  f.index_is_array = j.contains("index") && j["index"].is_array();
  if (f.index_is_array) {
    for (const json& run : j["index"]) {
      if (run.is_number_unsigned()) {
        f.index.push_back({RawRun::kId, run.get<uint64_t>(), 0});
      } else if (run.is_array() && run.size() == 2 && run[0].is_number_unsigned() &&
                 run[1].is_number_unsigned()) {
        f.index.push_back({RawRun::kRun, run[0].get<uint64_t>(), run[1].get<uint64_t>()});
      } else {
        f.index.push_back({RawRun::kBad, 0, 0});
      }
    }
  }
  return finish_piece(std::move(f));
}

std::string shard_record_to_string(const ShardRecord& record) {
  json pieces = json::array();
  for (const PieceRecord& p : record.pieces) pieces.push_back(piece_record_to_json(p));
  return json{{"writer", record.writer}, {"file", record.file}, {"pieces", pieces}}.dump();
}

Result<ShardRecord> shard_record_from_string(std::string_view text) {
  const json j = json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) {
    return invalid_argument("shard record is not a JSON object");
  }
  ShardRecord record;
  NTP_ASSIGN_OR_RETURN(record.writer, get_string(j, "writer", "shard record"));
  NTP_ASSIGN_OR_RETURN(record.file, get_string(j, "file", "shard record"));
  NTP_RETURN_IF_ERROR(validate_writer_id(record.writer));
  if (!j.contains("pieces") || !j["pieces"].is_array()) {
    return invalid_argument("shard record: 'pieces' must be an array");
  }
  for (const json& p : j["pieces"]) {
    NTP_ASSIGN_OR_RETURN(PieceRecord piece, piece_record_from_json(p));
    record.pieces.push_back(std::move(piece));
  }
  return record;
}

}  // namespace ntp::checkpoint
