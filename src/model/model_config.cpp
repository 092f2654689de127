#include "model/model_config.h"

#include "core/named_values.h"

namespace ntp::model {

namespace {

constexpr NamedValue<ModelFamily> kModelFamilyNames[] = {
    {ModelFamily::kGpt2, "gpt2"}, {ModelFamily::kLlama, "llama"}, {ModelFamily::kMoe, "moe"}};

// The fields every family has, copied from `from` to `to` (GptConfig, LlamaConfig, ModelConfig).
template <typename From, typename To>
void copy_shared_fields(const From& from, To& to) {
  to.n_layer = from.n_layer;
  to.n_head = from.n_head;
  to.n_embd = from.n_embd;
  to.n_ffn = from.n_ffn;
  to.n_ctx = from.n_ctx;
  to.vocab_size = from.vocab_size;
  to.ffn_unit = from.ffn_unit;
}

}  // namespace

ModelConfig::ModelConfig(const GptConfig& gpt) : family(ModelFamily::kGpt2) {
  copy_shared_fields(gpt, *this);
}

ModelConfig::ModelConfig(const LlamaConfig& llama) : family(ModelFamily::kLlama) {
  copy_shared_fields(llama, *this);
  n_kv_head = llama.n_kv_head;
  head_dim = llama.head_dim;
  rms_norm_eps = llama.rms_norm_eps;
  rope_theta = llama.rope_theta;
}

GptConfig ModelConfig::gpt() const {
  GptConfig c;
  copy_shared_fields(*this, c);
  return c;
}

MoeModelConfig ModelConfig::moe() const {
  MoeModelConfig c;
  c.llama = llama();
  c.n_experts = n_experts;
  c.top_k = top_k;
  c.n_shared = n_shared_experts;
  c.router_aux_loss_coef = router_aux_loss_coef;
  return c;
}

LlamaConfig ModelConfig::llama() const {
  LlamaConfig c;
  copy_shared_fields(*this, c);
  c.n_kv_head = n_kv_head == 0 ? n_head : n_kv_head;
  c.head_dim = head_dim;
  c.rms_norm_eps = rms_norm_eps;
  c.rope_theta = rope_theta;
  return c;
}

Status ModelConfig::validate() const {
  const ModelConfig defaults;
  if (family == ModelFamily::kMoe) return moe().validate();
  if (n_experts != defaults.n_experts || top_k != defaults.top_k ||
      n_shared_experts != defaults.n_shared_experts ||
      router_aux_loss_coef != defaults.router_aux_loss_coef) {
    return invalid_argument(
        "n_experts, top_k, n_shared_experts and router_aux_loss_coef are for --model moe; " +
        std::string(model_family_name(family)) + " has no experts");
  }
  if (family == ModelFamily::kLlama) return llama().validate();
  if (n_kv_head != 0 && n_kv_head != n_head) {
    return invalid_argument("n_kv_head = " + std::to_string(n_kv_head) +
                            " is for Llama; GPT-2 has one KV head per query head");
  }
  if (head_dim != 0 && head_dim * n_head != n_embd) {
    return invalid_argument("head_dim = " + std::to_string(head_dim) +
                            " is for Llama; GPT-2's head size is n_embd / n_head");
  }
  if (rms_norm_eps != defaults.rms_norm_eps || rope_theta != defaults.rope_theta) {
    return invalid_argument("rms_norm_eps and rope_theta are for Llama; GPT-2 has neither");
  }
  return gpt().validate();
}

int64_t ModelConfig::grouped_kv_heads() const {
  return family == ModelFamily::kGpt2 ? 0 : llama().n_kv_head;
}

int64_t ModelConfig::head_size() const {
  return family == ModelFamily::kGpt2 ? n_embd / n_head : llama().dim();
}

int64_t ModelConfig::num_params() const {
  switch (family) {
    case ModelFamily::kLlama:
      return llama().num_params();
    case ModelFamily::kMoe:
      return moe().num_params();
    case ModelFamily::kGpt2:
      break;
  }
  return gpt().num_params();
}

const char* model_family_name(ModelFamily family) { return name_of(kModelFamilyNames, family); }

Result<ModelFamily> parse_model_family(const std::string& text) {
  return parse_named(kModelFamilyNames, "--model", text);
}

}  // namespace ntp::model
