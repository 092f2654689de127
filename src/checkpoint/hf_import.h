// Importing Hugging Face checkpoints: the inverse of hf_export.h. A directory with config.json and
// model.safetensors (GPT2LMHeadModel, LlamaForCausalLM, MixtralForCausalLM or Qwen2MoeForCausalLM
// as ntp exports it) gives a manifest-form model_config and reads any piece (checkpoint/piece.h) of
// its logical tensors, so that any TP layout can load exactly its own slices, as from an ntp
// checkpoint.
//
// ntp's logical tensors already carry transformers' names and layouts (GPT-2's Conv1D weights
// [in, out]; Llama's projections [out, in] with q/k rows in transformers' rotate_half RoPE
// layout), so a tensor is read as stored: no transpose and no q/k permutation, exactly as the
// export writes it. Differences handled here: a tied Llama head (tie_word_embeddings true, no
// lm_head.weight) reads model.embed_tokens.weight; GPT-2 names without the "transformer." prefix
// (the layout of OpenAI's original upload) are accepted; F32, BF16 and F16 data are read as float;
// the weights may be one model.safetensors or several files listed by model.safetensors.index.json
// (transformers' sharded save); Mixtral's and Qwen2-MoE's per-expert tensors are read as ntp's
// stacked ones, and Qwen2-MoE's names and shared-expert scale undone (hf_names.h).
#pragma once

#include <filesystem>
#include <nlohmann/json.hpp>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "checkpoint/hf_names.h"
#include "checkpoint/piece.h"
#include "checkpoint/safetensors.h"
#include "core/status.h"

namespace ntp::checkpoint {

// The manifest-form model_config (hf_export.h's input: n_layer, n_head, n_embd, n_ffn, n_ctx,
// vocab_size, ffn_unit 1; for Llama also family, n_kv_head, head_dim, rms_norm_eps, rope_theta;
// for Mixtral also n_experts, top_k, n_shared_experts 0, router_aux_loss_coef)
// of a transformers config.json. kInvalidArgument naming the field and value for another
// architecture, a missing or bad field, or a feature ntp's model does not have (biases in Llama,
// RoPE scaling, another activation, untied GPT-2 embeddings).
Result<nlohmann::json> model_config_from_hf(const nlohmann::json& hf_config);

class HfModel {
 public:
  // True when `dir` holds a config.json and is not an ntp checkpoint (no manifest.json or
  // latest): then it is read as a Hugging Face directory.
  static bool is_hf_dir(const std::filesystem::path& dir);
  // Parses config.json and the safetensors headers (model.safetensors, or the files of
  // model.safetensors.index.json's weight_map); errors name the file (kInvalidArgument for bad
  // content, kNotFound for a missing file).
  static Result<HfModel> open(const std::filesystem::path& dir);

  const std::filesystem::path& dir() const { return dir_; }
  const nlohmann::json& model_config() const { return model_config_; }
  // Reads `request` (any kind; the "value" is all there is) of the logical tensor
  // request.tensor, whose shape must be request.logical_shape. kInvalidArgument naming the
  // tensor for a missing tensor, another shape or an unsupported dtype. Not thread-safe: the last
  // tensor read is kept, so that the pieces of one tensor (ZeRO-1 blocks) read it once.
  Status read(const PieceSpec& request, std::span<float> out) const;

 private:
  struct Found {
    const SafetensorsFile* file = nullptr;
    const SafetensorsEntry* entry = nullptr;
  };
  HfModel(std::filesystem::path dir, nlohmann::json model_config, std::string weights,
          std::vector<SafetensorsFile> files, bool tied_head, HfArch arch)
      : dir_(std::move(dir)),
        model_config_(std::move(model_config)),
        weights_(std::move(weights)),
        files_(std::move(files)),
        tied_head_(tied_head),
        arch_(arch) {}
  // kInvalidArgument naming the file, tensor and value unless every tensor the architecture has
  // and ntp's model does not (hf_zero_tensors) is zero or absent.
  Status check_zero_tensors() const;
  Found find(const std::string& tensor) const;
  Found find_stored(std::string_view name) const;
  // kInvalidArgument naming the file unless `found` is a stored tensor `name` of `shape` and a
  // dtype ntp reads.
  Status check_stored(const Found& found, const std::string& name,
                      const std::vector<int64_t>& shape) const;
  // The whole logical tensor as float32 (cached: see read), a stacked expert tensor gathered from
  // Mixtral's per-expert tensors.
  Result<const std::vector<float>*> load(const std::string& tensor,
                                         const std::vector<int64_t>& shape) const;

  std::filesystem::path dir_;
  nlohmann::json model_config_;
  std::string weights_;  // "model.safetensors" or "model.safetensors.index.json" (for messages)
  std::vector<SafetensorsFile> files_;
  bool tied_head_ = false;  // Llama: lm_head.weight is model.embed_tokens.weight
  HfArch arch_ = HfArch::kGpt2;
  mutable std::string cached_name_;  // the tensor and shape cached_values_ were read as
  mutable std::vector<int64_t> cached_shape_;
  mutable std::vector<float> cached_values_;
};

}  // namespace ntp::checkpoint
