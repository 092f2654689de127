// ModelConfig: the hyperparameters of any model family the trainer can run, and which family.
//
// One flat struct so that code outside src/model/ (the trainer, checkpoints, the CLI) reads the
// fields every family shares (n_layer, n_ctx, vocab_size, ...) without naming a family; the
// family's own config (GptConfig, LlamaConfig) is made from it by gpt() / llama(), and a family
// config converts back implicitly, field for field. Fields a family does not have are ignored by
// it and must stay at their defaults (validate() says so).
#pragma once

#include <cstdint>
#include <string>

#include "core/status.h"
#include "model/gpt_config.h"
#include "model/llama_config.h"
#include "model/moe_model_config.h"

namespace ntp::model {

// kMoe: a Llama decoder whose FFNs are Mixtral MoE blocks (model/moe_model.h).
enum class ModelFamily { kGpt2, kLlama, kMoe };

struct ModelConfig {
  ModelFamily family = ModelFamily::kGpt2;
  int64_t n_layer = 2;
  int64_t n_head = 4;
  int64_t n_kv_head = 0;  // Llama: key/value heads (0: n_head, plain multi-head attention)
  int64_t n_embd = 64;
  int64_t head_dim = 0;  // Llama: 0 means n_embd / n_head
  int64_t n_ffn = 0;     // 0 means 4 * n_embd
  int64_t n_ctx = 64;
  int64_t vocab_size = 256;
  int64_t ffn_unit = 1;
  double rms_norm_eps = 1e-5;  // Llama
  double rope_theta = 1e4;     // Llama
  // MoE (--model moe; the other families refuse them when set). n_ffn is one expert's width.
  int64_t n_experts = 0;  // routed experts E (0: not a MoE; moe needs >= 1)
  int64_t top_k = 2;      // experts per token
  int64_t n_shared_experts = 0;
  double router_aux_loss_coef = 0.02;  // Mixtral's

  ModelConfig() = default;
  ModelConfig(const GptConfig& gpt);      // NOLINT(google-explicit-constructor): same fields
  ModelConfig(const LlamaConfig& llama);  // NOLINT(google-explicit-constructor): same fields
  bool operator==(const ModelConfig&) const = default;

  GptConfig gpt() const;
  // Llama's fields (for kMoe: everything but the FFN).
  LlamaConfig llama() const;
  MoeModelConfig moe() const;

  int64_t ffn() const { return n_ffn == 0 ? 4 * n_embd : n_ffn; }
  // For the layout algebra (shard/unit_space.h ModelShape): the key/value heads of a family whose
  // K/V projections are a unit space of their own (Llama and MoE, also when n_kv_head = n_head), 0
  // for one whose K and V go with each head (GPT-2); and the size of a head.
  int64_t grouped_kv_heads() const;
  int64_t head_size() const;
  // kInvalidArgument naming the bad field (the family's own checks, plus: no Llama-only field
  // set for GPT-2, no MoE field set for GPT-2 or Llama).
  Status validate() const;
  // Number of logical parameters (the family's count).
  int64_t num_params() const;
};

// "gpt2" / "llama" / "moe".
const char* model_family_name(ModelFamily family);
// Parses a family name; the error names the flag and the choices.
Result<ModelFamily> parse_model_family(const std::string& text);

}  // namespace ntp::model
