#include "model/model_factory.h"

#include "core/check.h"
#include "model/gpt_model.h"
#include "model/llama_model.h"
#include "model/moe_model.h"

namespace ntp::model {

std::vector<int64_t>& ModelShard::units(UnitSpaceId space) {
  switch (space) {
    case UnitSpaceId::kHeads:
      return heads;
    case UnitSpaceId::kFfn:
      return ffn_units;
    case UnitSpaceId::kVocab:
      return vocab_rows;
    case UnitSpaceId::kHeadRows:
      return head_rows;
    case UnitSpaceId::kExperts:
      return experts;
    default:
      break;
  }
  NTP_CHECK_MSG(false, "ModelShard lists no units of this space (KV groups are derived)");
  return heads;
}

Result<std::unique_ptr<Model>> create_model(const ModelConfig& config, const ModelShard& shard,
                                            uint64_t seed, TpGroup* group, bool initialize) {
  NTP_RETURN_IF_ERROR(config.validate());
  if (config.family == ModelFamily::kMoe) {
    LlamaShard s{shard.heads, shard.ffn_units, shard.vocab_rows, shard.head_rows};
    NTP_ASSIGN_OR_RETURN(MoeModel m, MoeModel::create(config.moe(), std::move(s), shard.experts,
                                                      seed, group, initialize));
    return std::unique_ptr<Model>(std::make_unique<MoeModel>(std::move(m)));
  }
  if (!shard.experts.empty()) {
    return invalid_argument(std::string(model_family_name(config.family)) +
                            " has no experts: the shard lists " +
                            std::to_string(shard.experts.size()) + "; use --model moe");
  }
  if (config.family == ModelFamily::kLlama) {
    LlamaShard s{shard.heads, shard.ffn_units, shard.vocab_rows, shard.head_rows};
    NTP_ASSIGN_OR_RETURN(LlamaModel m,
                         LlamaModel::create(config.llama(), std::move(s), seed, group, initialize));
    return std::unique_ptr<Model>(std::make_unique<LlamaModel>(std::move(m)));
  }
  if (!shard.head_rows.empty()) {
    return invalid_argument("GPT-2's LM head is tied to the embedding: the shard lists head rows");
  }
  TpShard s{shard.heads, shard.ffn_units, shard.vocab_rows};
  NTP_ASSIGN_OR_RETURN(GptModel m,
                       GptModel::create(config.gpt(), std::move(s), seed, group, initialize));
  return std::unique_ptr<Model>(std::make_unique<GptModel>(std::move(m)));
}

double training_flops(const ModelConfig& config, int64_t b, int64_t t) {
  switch (config.family) {
    case ModelFamily::kLlama:
      return LlamaModel::training_flops(config.llama(), b, t);
    case ModelFamily::kMoe:
      return MoeModel::training_flops(config.moe(), b, t);
    case ModelFamily::kGpt2:
      break;
  }
  return GptModel::training_flops(config.gpt(), b, t);
}

}  // namespace ntp::model
