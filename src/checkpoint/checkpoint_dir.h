// The directory layout of checkpoints and the commit protocol.
//
//   SAVE_DIR/step_00000042/shard_<writer>.safetensors   one per writing rank
//   SAVE_DIR/step_00000042/manifest.json                written last, atomically
//   SAVE_DIR/latest                                     "step_00000042\n", after the manifest
//
// A step directory without manifest.json is incomplete and never loaded. Save protocol:
//   1. every writer: prepare_step_dir(save_dir, step), then write_shard / AsyncShardWriter;
//   2. the trainer gathers every writer's ShardRecord to one rank (shard_record_to_string);
//   3. that rank: commit_checkpoint(save_dir, meta, records, {.keep_last = K}).
// A crash before step 3 finishes leaves `latest` and every complete checkpoint untouched.
#pragma once

#include <cstdint>
#include <filesystem>
#include <vector>

#include "checkpoint/manifest.h"
#include "core/status.h"

namespace ntp::checkpoint {

inline constexpr const char* kManifestFile = "manifest.json";
inline constexpr const char* kLatestFile = "latest";

// SAVE_DIR/step_<8 digits>.
std::filesystem::path step_dir_path(const std::filesystem::path& save_dir, int64_t step);
// True when `dir` holds a manifest.json.
bool is_complete_step_dir(const std::filesystem::path& dir);

// Creates SAVE_DIR/step_<step> (and SAVE_DIR) if needed; safe to call from every writer at once.
// kAlreadyExists when that step is already complete; kInvalidArgument for a step outside
// [0, 99999999].
Result<std::filesystem::path> prepare_step_dir(const std::filesystem::path& save_dir, int64_t step);

struct CommitOptions {
  int keep_last = 0;  // keep the newest K complete checkpoints (0: keep all)
};

// Builds the manifest from every writer's record (coverage checked), checks that each record's
// file exists with a header matching its pieces, deletes files in the step directory that no
// record names (a crashed attempt's shards, temporaries), writes manifest.json, points `latest`
// at the step, then prunes (prune_checkpoints). Returns the manifest.
Result<Manifest> commit_checkpoint(const std::filesystem::path& save_dir, CheckpointMeta meta,
                                   const std::vector<ShardRecord>& shards,
                                   const CommitOptions& options = {});

// The step directory `latest` names; kNotFound when there is none, kInvalidArgument when it
// names something that is not a complete step directory.
Result<std::filesystem::path> latest_step_dir(const std::filesystem::path& save_dir);

// Steps of the complete / incomplete step directories in SAVE_DIR, ascending.
std::vector<int64_t> complete_steps(const std::filesystem::path& save_dir);
std::vector<int64_t> incomplete_steps(const std::filesystem::path& save_dir);

// Removes the oldest complete checkpoints so that `keep_last` remain (never the one `latest`
// names; keep_last <= 0 removes none), and incomplete step directories older than the newest
// complete one. A complete directory loses its manifest first, so a crash mid-removal leaves an
// incomplete directory, never a damaged "complete" one.
Status prune_checkpoints(const std::filesystem::path& save_dir, int keep_last);

}  // namespace ntp::checkpoint
