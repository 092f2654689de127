// The one place that turns a family-neutral ModelConfig and a rank's units into a model of that
// family (model/model.h), plus the family-dependent figures the trainer reports.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "core/status.h"
#include "model/model.h"
#include "model/model_config.h"
#include "model/param.h"
#include "model/tp_group.h"

namespace ntp::model {

// The units of each unit space (model/param.h) one TP rank holds, in its storage order. Llama's
// KV groups are not listed: they follow from the query heads (model/llama_shard.h).
struct ModelShard {
  std::vector<int64_t> heads;       // kHeads: attention heads (Llama: query heads)
  std::vector<int64_t> ffn_units;   // kFfn
  std::vector<int64_t> vocab_rows;  // kVocab: rows of the (GPT-2: tied) token embedding
  std::vector<int64_t> head_rows;   // kHeadRows: rows of an untied LM head (Llama); else empty
  std::vector<int64_t> experts;     // kExperts: routed experts (MoE; ffn_units then empty)

  // The list of `space` (kHeads, kFfn, kVocab, kHeadRows or kExperts).
  std::vector<int64_t>& units(UnitSpaceId space);
};

// A model of config.family for one TP rank (see GptModel::create / LlamaModel::create /
// MoeModel::create: `group`
// must outlive it, degree 1 when null; `initialize` false leaves the weights zero).
// kInvalidArgument when the config or the shard is invalid.
Result<std::unique_ptr<Model>> create_model(const ModelConfig& config, const ModelShard& shard,
                                            uint64_t seed, TpGroup* group = nullptr,
                                            bool initialize = true);

// Model FLOPs of one forward+backward over b*t tokens of the whole replica (the family's count).
double training_flops(const ModelConfig& config, int64_t b, int64_t t);

}  // namespace ntp::model
