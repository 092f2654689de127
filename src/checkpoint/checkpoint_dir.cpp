#include "checkpoint/checkpoint_dir.h"

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <set>
#include <sstream>
#include <system_error>

#include "checkpoint/atomic_file.h"
#include "checkpoint/safetensors.h"

namespace ntp::checkpoint {
namespace fs = std::filesystem;
namespace {

constexpr int64_t kMaxStep = 99999999;

// The step of a "step_<8 digits>" name, or -1.
int64_t parse_step_name(const std::string& name) {
  if (name.size() != 13 || !name.starts_with("step_")) return -1;
  int64_t step = 0;
  for (size_t i = 5; i < name.size(); ++i) {
    if (name[i] < '0' || name[i] > '9') return -1;
    step = step * 10 + (name[i] - '0');
  }
  return step;
}

std::vector<int64_t> steps_where(const fs::path& save_dir, bool complete) {
  std::vector<int64_t> steps;
  std::error_code ec;
  for (const fs::directory_entry& e : fs::directory_iterator(save_dir, ec)) {
    const int64_t step = parse_step_name(e.path().filename().string());
    if (step >= 0 && e.is_directory(ec) && is_complete_step_dir(e.path()) == complete) {
      steps.push_back(step);
    }
  }
  std::sort(steps.begin(), steps.end());
  return steps;
}

Status remove_dir(const fs::path& dir) {
  std::error_code ec;
  fs::remove(dir / kManifestFile, ec);
  if (ec)
    return internal_error("cannot remove " + (dir / kManifestFile).string() + ": " + ec.message());
  fs::remove_all(dir, ec);
  if (ec) return internal_error("cannot remove " + dir.string() + ": " + ec.message());
  return ok_status();
}

// Every record's file must exist and hold each piece under its key as F32 of its local shape.
Status check_files(const fs::path& dir, const std::vector<ShardRecord>& shards) {
  for (const ShardRecord& shard : shards) {
    Result<SafetensorsFile> file = SafetensorsFile::open(dir / shard.file);
    if (!file.ok()) return file.status();
    for (const PieceRecord& p : shard.pieces) {
      const SafetensorsEntry* e = file->header().find(p.key);
      if (p.file != shard.file || e == nullptr || e->dtype != "F32" ||
          e->shape != local_shape(p.spec)) {
        return invalid_argument((dir / shard.file).string() + ": tensor " + piece_name(p.spec) +
                                " is not stored under key '" + p.key + "' as F32 " +
                                "of its local shape");
      }
    }
  }
  return ok_status();
}

}  // namespace

fs::path step_dir_path(const fs::path& save_dir, int64_t step) {
  char name[32];
  std::snprintf(name, sizeof(name), "step_%08lld", static_cast<long long>(step));
  return save_dir / name;
}

bool is_complete_step_dir(const fs::path& dir) {
  std::error_code ec;
  return fs::is_regular_file(dir / kManifestFile, ec);
}

Result<fs::path> prepare_step_dir(const fs::path& save_dir, int64_t step) {
  if (step < 0 || step > kMaxStep) {
    return invalid_argument("checkpoint step " + std::to_string(step) +
                            " is outside [0, 99999999]");
  }
  const fs::path dir = step_dir_path(save_dir, step);
  if (is_complete_step_dir(dir)) {
    return Status(StatusCode::kAlreadyExists, dir.string() + " is already a complete checkpoint");
  }
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return internal_error("cannot create " + dir.string() + ": " + ec.message());
  return dir;
}

Result<Manifest> commit_checkpoint(const fs::path& save_dir, CheckpointMeta meta,
                                   const std::vector<ShardRecord>& shards,
                                   const CommitOptions& options) {
  const int64_t step = meta.step;
  const fs::path dir = step_dir_path(save_dir, step);
  if (is_complete_step_dir(dir)) {
    return Status(StatusCode::kAlreadyExists, dir.string() + " is already a complete checkpoint");
  }
  std::set<std::string> writers;
  for (const ShardRecord& s : shards) {
    if (!writers.insert(s.writer).second) {
      return invalid_argument("commit: writer '" + s.writer + "' reported twice");
    }
  }
  NTP_ASSIGN_OR_RETURN(Manifest manifest, build_manifest(std::move(meta), shards));
  NTP_RETURN_IF_ERROR(check_files(dir, shards));
  std::set<std::string> referenced;
  for (const ShardRecord& s : shards) referenced.insert(s.file);
  std::error_code ec;
  for (const fs::directory_entry& e : fs::directory_iterator(dir, ec)) {
    if (!referenced.contains(e.path().filename().string())) fs::remove_all(e.path(), ec);
  }
  // Every shard's rename durable before the manifest that makes them a checkpoint.
  NTP_RETURN_IF_ERROR(fsync_directory(dir));
  NTP_RETURN_IF_ERROR(write_file_atomically(dir / kManifestFile, manifest_to_string(manifest)));
  NTP_RETURN_IF_ERROR(
      write_file_atomically(save_dir / kLatestFile, dir.filename().string() + "\n"));
  NTP_RETURN_IF_ERROR(prune_checkpoints(save_dir, options.keep_last));
  return manifest;
}

Result<fs::path> latest_step_dir(const fs::path& save_dir) {
  std::ifstream in(save_dir / kLatestFile);
  if (!in) return not_found((save_dir / kLatestFile).string() + ": no such file");
  std::string name;
  std::getline(in, name);
  if (parse_step_name(name) < 0) {
    return invalid_argument((save_dir / kLatestFile).string() + ": '" + name +
                            "' is not a step_<8 digits> name");
  }
  const fs::path dir = save_dir / name;
  if (!is_complete_step_dir(dir)) {
    return invalid_argument((save_dir / kLatestFile).string() + " names " + dir.string() +
                            ", which has no manifest.json (not a checkpoint)");
  }
  return dir;
}

std::vector<int64_t> complete_steps(const fs::path& save_dir) {
  return steps_where(save_dir, true);
}

std::vector<int64_t> incomplete_steps(const fs::path& save_dir) {
  return steps_where(save_dir, false);
}

Status prune_checkpoints(const fs::path& save_dir, int keep_last) {
  std::vector<int64_t> complete = complete_steps(save_dir);
  if (complete.empty()) return ok_status();
  int64_t pinned = -1;
  if (Result<fs::path> latest = latest_step_dir(save_dir); latest.ok()) {
    pinned = parse_step_name(latest->filename().string());
  }
  const int64_t newest = complete.back();
  for (int64_t step : incomplete_steps(save_dir)) {
    if (step < newest) NTP_RETURN_IF_ERROR(remove_dir(step_dir_path(save_dir, step)));
  }
  if (keep_last <= 0) return ok_status();
  auto excess = static_cast<int64_t>(complete.size()) - keep_last;
  for (int64_t step : complete) {
    if (excess <= 0) break;
    if (step == pinned) continue;
    NTP_RETURN_IF_ERROR(remove_dir(step_dir_path(save_dir, step)));
    --excess;
  }
  return ok_status();
}

}  // namespace ntp::checkpoint
