#include "checkpoint/hf_import.h"

#include <algorithm>
#include <cstring>
#include <fstream>
#include <set>
#include <sstream>
#include <vector>

#include "checkpoint/hf_names.h"

namespace ntp::checkpoint {
namespace fs = std::filesystem;
namespace {

using nlohmann::json;

Status config_error(const std::string& what) { return invalid_argument("config.json: " + what); }

// A positive integer field; `fallback` (when > 0) when the field is absent or null.
Result<int64_t> int_field(const json& c, const char* name, int64_t fallback = 0) {
  if (!c.contains(name) || c[name].is_null()) {
    if (fallback > 0) return fallback;
    return config_error(std::string("\"") + name + "\" is missing; it must be a positive integer");
  }
  if (!c[name].is_number_integer() || c[name].get<int64_t>() < 1) {
    return config_error(std::string("\"") + name + "\" is " + c[name].dump() +
                        "; it must be a positive integer");
  }
  return c[name].get<int64_t>();
}

Result<double> positive_number(const json& c, const char* name, double fallback) {
  if (!c.contains(name) || c[name].is_null()) return fallback;
  if (!c[name].is_number() || !(c[name].get<double>() > 0.0)) {
    return config_error(std::string("\"") + name + "\" is " + c[name].dump() +
                        "; it must be a positive number");
  }
  return c[name].get<double>();
}

// kInvalidArgument unless field `name` is absent, null or one of `allowed`.
Status expect_field(const json& c, const char* name, const std::vector<json>& allowed,
                    const char* why) {
  if (!c.contains(name) || c[name].is_null()) return ok_status();
  for (const json& a : allowed) {
    if (c[name] == a) return ok_status();
  }
  return config_error(std::string("\"") + name + "\" is " + c[name].dump() + ", but " + why);
}

Result<json> gpt2_model_config(const json& c) {
  NTP_RETURN_IF_ERROR(expect_field(c, "activation_function", {"gelu_new", "gelu_pytorch_tanh"},
                                   "ntp's GPT-2 uses the tanh GELU (gelu_new)"));
  NTP_RETURN_IF_ERROR(expect_field(c, "layer_norm_epsilon", {1e-5}, "ntp's LayerNorm uses 1e-5"));
  NTP_RETURN_IF_ERROR(
      expect_field(c, "tie_word_embeddings", {true}, "ntp's GPT-2 ties lm_head to wte"));
  for (const char* flag : {"scale_attn_by_inverse_layer_idx", "reorder_and_upcast_attn"}) {
    NTP_RETURN_IF_ERROR(expect_field(c, flag, {false}, "ntp's GPT-2 attention has no such option"));
  }
  NTP_RETURN_IF_ERROR(expect_field(c, "scale_attn_weights", {true},
                                   "ntp's GPT-2 scales attention by 1/sqrt(head size)"));
  NTP_ASSIGN_OR_RETURN(const int64_t n_embd, int_field(c, "n_embd"));
  NTP_ASSIGN_OR_RETURN(const int64_t n_positions, int_field(c, "n_positions"));
  json m = {{"n_layer", 0},         {"n_head", 0},     {"n_embd", n_embd}, {"n_ffn", 0},
            {"n_ctx", n_positions}, {"vocab_size", 0}, {"ffn_unit", 1}};
  for (const char* name : {"n_layer", "n_head", "vocab_size"}) {
    NTP_ASSIGN_OR_RETURN(m[name], int_field(c, name));
  }
  NTP_ASSIGN_OR_RETURN(m["n_ffn"], int_field(c, "n_inner", 4 * n_embd));
  return m;
}

Result<json> llama_model_config(const json& c) {
  NTP_RETURN_IF_ERROR(expect_field(c, "hidden_act", {"silu"}, "ntp's Llama FFN is SwiGLU (silu)"));
  NTP_RETURN_IF_ERROR(
      expect_field(c, "rope_scaling", {}, "ntp's RoPE has no scaling; only plain RoPE is read"));
  for (const char* bias : {"attention_bias", "mlp_bias"}) {
    NTP_RETURN_IF_ERROR(expect_field(c, bias, {false}, "ntp's Llama has no biases"));
  }
  NTP_ASSIGN_OR_RETURN(const int64_t n_embd, int_field(c, "hidden_size"));
  NTP_ASSIGN_OR_RETURN(const int64_t n_head, int_field(c, "num_attention_heads"));
  NTP_ASSIGN_OR_RETURN(const int64_t n_kv, int_field(c, "num_key_value_heads", n_head));
  if (n_head % n_kv != 0) {
    return config_error("\"num_attention_heads\" " + std::to_string(n_head) +
                        " is not a multiple of \"num_key_value_heads\" " + std::to_string(n_kv) +
                        "; grouped-query attention needs whole groups of query heads");
  }
  json m = {{"family", "llama"},
            {"n_head", n_head},
            {"n_kv_head", n_kv},
            {"n_embd", n_embd},
            {"ffn_unit", 1}};
  NTP_ASSIGN_OR_RETURN(m["n_layer"], int_field(c, "num_hidden_layers"));
  NTP_ASSIGN_OR_RETURN(m["head_dim"], int_field(c, "head_dim", n_embd / n_head));
  NTP_ASSIGN_OR_RETURN(m["n_ffn"], int_field(c, "intermediate_size"));
  NTP_ASSIGN_OR_RETURN(m["n_ctx"], int_field(c, "max_position_embeddings"));
  NTP_ASSIGN_OR_RETURN(m["vocab_size"], int_field(c, "vocab_size"));
  // transformers' defaults for a LlamaConfig that leaves them out.
  NTP_ASSIGN_OR_RETURN(m["rms_norm_eps"], positive_number(c, "rms_norm_eps", 1e-6));
  NTP_ASSIGN_OR_RETURN(m["rope_theta"], positive_number(c, "rope_theta", 1e4));
  return m;
}

// kInvalidArgument for a sliding window shorter than the context: ntp's attention is full causal
// attention. `m` is the Llama part already read.
Status check_no_sliding_window(const json& c, const json& m) {
  if (!c.contains("sliding_window") || c["sliding_window"].is_null()) return ok_status();
  NTP_ASSIGN_OR_RETURN(const int64_t window, int_field(c, "sliding_window"));
  if (window < m["n_ctx"].get<int64_t>()) {
    return config_error("\"sliding_window\" is " + std::to_string(window) +
                        ", shorter than max_position_embeddings " + m["n_ctx"].dump() +
                        "; ntp's attention is full causal attention");
  }
  return ok_status();
}

// The aux loss's coefficient; transformers' MoE configs default to 0.001 when it is left out.
Status read_aux_coef(const json& c, json& m) {
  m["router_aux_loss_coef"] = c.value("router_aux_loss_coef", json(0.001));
  if (!m["router_aux_loss_coef"].is_number()) {
    return config_error("\"router_aux_loss_coef\" is " + c["router_aux_loss_coef"].dump() +
                        "; it must be a number");
  }
  return ok_status();
}

// MixtralForCausalLM: Llama's attention with a sparse MoE block (model/moe_block.h's semantics:
// softmax router, top-k renormalized, SwiGLU experts, no shared experts).
Result<json> mixtral_model_config(const json& c) {
  NTP_RETURN_IF_ERROR(expect_field(c, "router_jitter_noise", {0, 0.0},
                                   "ntp's router adds no noise; set it to 0 to train or evaluate"));
  NTP_ASSIGN_OR_RETURN(json m, llama_model_config(c));
  NTP_RETURN_IF_ERROR(check_no_sliding_window(c, m));
  m["family"] = "moe";
  NTP_ASSIGN_OR_RETURN(m["n_experts"], int_field(c, "num_local_experts"));
  NTP_ASSIGN_OR_RETURN(m["top_k"], int_field(c, "num_experts_per_tok", 2));
  m["n_shared_experts"] = 0;
  NTP_RETURN_IF_ERROR(read_aux_coef(c, m));
  return m;
}

// Qwen2MoeForCausalLM as ntp exports a MoE with shared experts (hf_names.h): every layer sparse,
// the top-k weights renormalized, no sliding window, the shared experts n x one expert's width.
// (Its q/k/v biases and shared-expert gate must be zero: HfModel::open checks the tensors.)
Result<json> qwen2_moe_model_config(const json& c) {
  NTP_RETURN_IF_ERROR(
      expect_field(c, "norm_topk_prob", {true}, "ntp renormalizes the top-k routing weights"));
  NTP_RETURN_IF_ERROR(expect_field(c, "decoder_sparse_step", {1}, "every ntp MoE layer is sparse"));
  NTP_RETURN_IF_ERROR(expect_field(c, "mlp_only_layers", {json::array()},
                                   "every ntp MoE layer is sparse (no dense MLP layers)"));
  NTP_RETURN_IF_ERROR(
      expect_field(c, "use_sliding_window", {false}, "ntp's attention is full causal attention"));
  NTP_ASSIGN_OR_RETURN(json m, llama_model_config(c));
  m["family"] = "moe";
  NTP_ASSIGN_OR_RETURN(m["n_experts"], int_field(c, "num_experts"));
  NTP_ASSIGN_OR_RETURN(m["top_k"], int_field(c, "num_experts_per_tok", 4));
  NTP_ASSIGN_OR_RETURN(const int64_t expert, int_field(c, "moe_intermediate_size"));
  NTP_ASSIGN_OR_RETURN(const int64_t shared, int_field(c, "shared_expert_intermediate_size"));
  if (shared % expert != 0) {
    return config_error("\"shared_expert_intermediate_size\" " + std::to_string(shared) +
                        " is not a multiple of \"moe_intermediate_size\" " +
                        std::to_string(expert) +
                        "; ntp's shared experts are a whole number of experts' width");
  }
  m["n_ffn"] = expert;
  m["n_shared_experts"] = shared / expert;
  NTP_RETURN_IF_ERROR(read_aux_coef(c, m));
  return m;
}

std::string shape_text(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

// IEEE half / bfloat16 bit patterns to float.
float bf16_to_float(uint16_t h) {
  const uint32_t bits = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

float f16_to_float(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const int exp = (h >> 10) & 0x1f;
  uint32_t mant = h & 0x3ffu;
  uint32_t bits = 0;
  if (exp == 0x1f) {
    bits = sign | 0x7f800000u | (mant << 13);  // inf / nan
  } else if (exp != 0) {
    bits = sign | (static_cast<uint32_t>(exp + 112) << 23) | (mant << 13);
  } else if (mant != 0) {  // subnormal: normalize
    int e = 113;
    while ((mant & 0x400u) == 0) {
      mant <<= 1;
      --e;
    }
    bits = sign | (static_cast<uint32_t>(e) << 23) | ((mant & 0x3ffu) << 13);
  } else {
    bits = sign;
  }
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

// The stored bytes of one tensor as float32 values.
std::vector<float> to_floats(const std::string& dtype, const std::vector<std::byte>& bytes) {
  std::vector<float> out;
  if (dtype == "F32") {
    out.resize(bytes.size() / 4);
    std::memcpy(out.data(), bytes.data(), out.size() * 4);
    return out;
  }
  out.resize(bytes.size() / 2);
  for (size_t i = 0; i < out.size(); ++i) {
    uint16_t h;
    std::memcpy(&h, bytes.data() + 2 * i, 2);
    out[i] = dtype == "BF16" ? bf16_to_float(h) : f16_to_float(h);
  }
  return out;
}

Result<json> read_json(const fs::path& path) {
  std::ifstream in(path);
  if (!in) return not_found(path.string() + " does not exist");
  std::stringstream text;
  text << in.rdbuf();
  return json::parse(text.str(), nullptr, /*allow_exceptions=*/false);
}

// The safetensors files of DIR: model.safetensors, or those model.safetensors.index.json's
// weight_map names (each once, in name order).
Result<std::vector<SafetensorsFile>> open_weights(const fs::path& dir, std::string& weights) {
  std::vector<SafetensorsFile> files;
  std::error_code ec;
  weights = "model.safetensors";
  if (fs::exists(dir / weights, ec) || !fs::exists(dir / "model.safetensors.index.json", ec)) {
    NTP_ASSIGN_OR_RETURN(SafetensorsFile file, SafetensorsFile::open(dir / weights));
    files.push_back(std::move(file));
    return files;
  }
  weights = "model.safetensors.index.json";
  NTP_ASSIGN_OR_RETURN(const json index, read_json(dir / weights));
  const json map = index.is_object() ? index.value("weight_map", json()) : json();
  if (!map.is_object() || map.empty()) {
    return invalid_argument((dir / weights).string() +
                            ": no \"weight_map\" object of tensor names to file names");
  }
  std::set<std::string> names;
  for (const auto& [tensor, file] : map.items()) {
    if (!file.is_string() || file.get<std::string>().find('/') != std::string::npos) {
      return invalid_argument((dir / weights).string() + ": weight_map[\"" + tensor + "\"] is " +
                              file.dump() + "; it must name a file in " + dir.string());
    }
    names.insert(file.get<std::string>());
  }
  for (const std::string& name : names) {
    NTP_ASSIGN_OR_RETURN(SafetensorsFile file, SafetensorsFile::open(dir / name));
    files.push_back(std::move(file));
  }
  return files;
}

// The architecture config.json names (model_config_from_hf has accepted it).
HfArch arch_of(const json& c) {
  const json archs = c.value("architectures", json::array());
  const std::string arch = archs.is_array() && archs.size() == 1 && archs[0].is_string()
                               ? archs[0].get<std::string>()
                               : std::string();
  if (arch == "LlamaForCausalLM") return HfArch::kLlama;
  if (arch == "MixtralForCausalLM") return HfArch::kMixtral;
  if (arch == "Qwen2MoeForCausalLM") return HfArch::kQwen2Moe;
  return HfArch::kGpt2;
}

}  // namespace

Result<json> model_config_from_hf(const json& c) {
  if (!c.is_object()) return config_error("is not a JSON object");
  const json archs = c.value("architectures", json::array());
  const std::string arch = archs.is_array() && archs.size() == 1 && archs[0].is_string()
                               ? archs[0].get<std::string>()
                               : std::string();
  if (arch == "GPT2LMHeadModel") return gpt2_model_config(c);
  if (arch == "LlamaForCausalLM") return llama_model_config(c);
  if (arch == "MixtralForCausalLM") return mixtral_model_config(c);
  if (arch == "Qwen2MoeForCausalLM") return qwen2_moe_model_config(c);
  return config_error("\"architectures\" " + archs.dump() +
                      " is not supported; ntp reads [\"GPT2LMHeadModel\"], "
                      "[\"LlamaForCausalLM\"], [\"MixtralForCausalLM\"] or "
                      "[\"Qwen2MoeForCausalLM\"]");
}

bool HfModel::is_hf_dir(const fs::path& dir) {
  std::error_code ec;
  return fs::is_regular_file(dir / "config.json", ec) && !fs::exists(dir / "manifest.json", ec) &&
         !fs::exists(dir / "latest", ec);
}

Result<HfModel> HfModel::open(const fs::path& dir) {
  NTP_ASSIGN_OR_RETURN(const json config, read_json(dir / "config.json"));
  Result<json> model = model_config_from_hf(config);
  if (!model.ok()) {
    return invalid_argument(dir.string() + "/" + model.status().message());  // DIR/config.json: ..
  }
  std::string weights;
  NTP_ASSIGN_OR_RETURN(std::vector<SafetensorsFile> files, open_weights(dir, weights));
  const bool tied = model->contains("family") && config.value("tie_word_embeddings", false);
  const HfArch arch = arch_of(config);
  HfModel hf(dir, std::move(*model), std::move(weights), std::move(files), tied, arch);
  NTP_RETURN_IF_ERROR(hf.check_zero_tensors());
  return hf;
}

Status HfModel::check_zero_tensors() const {
  for (const HfPart& z : hf_zero_tensors(arch_, model_config_)) {
    const Found found = find_stored(z.name);
    if (found.entry == nullptr) continue;  // absent: the architecture's option is off
    NTP_RETURN_IF_ERROR(check_stored(found, z.name, z.shape));
    std::vector<std::byte> bytes(found.entry->end - found.entry->begin);
    NTP_RETURN_IF_ERROR(found.file->read(found.entry->begin, bytes));
    const std::vector<float> values = to_floats(found.entry->dtype, bytes);
    for (size_t i = 0; i < values.size(); ++i) {
      if (values[i] == 0.0f) continue;
      return invalid_argument(
          found.file->path().string() + ": tensor " + z.name + " holds " +
          std::to_string(values[i]) + " at element " + std::to_string(i) +
          "; ntp's MoE has no attention biases and no shared-expert gate, so it reads a "
          "Qwen2-MoE only where they are zero (as ntp exports one)");
    }
  }
  return ok_status();
}

HfModel::Found HfModel::find_stored(std::string_view name) const {
  for (const SafetensorsFile& f : files_) {
    if (const SafetensorsEntry* e = f.header().find(name)) return {&f, e};
  }
  return {};
}

HfModel::Found HfModel::find(const std::string& tensor) const {
  if (Found f = find_stored(tensor); f.entry != nullptr) return f;
  if (tied_head_ && tensor == "lm_head.weight") return find_stored("model.embed_tokens.weight");
  constexpr std::string_view kPrefix = "transformer.";
  if (tensor.starts_with(kPrefix))
    return find_stored(std::string_view(tensor).substr(kPrefix.size()));
  return {};
}

Result<const std::vector<float>*> HfModel::load(const std::string& tensor,
                                                const std::vector<int64_t>& shape) const {
  if (cached_name_ == tensor && cached_shape_ == shape) return &cached_values_;
  cached_name_.clear();
  cached_values_.clear();
  // The tensor as stored under its own name, else as the architecture's parts (hf_names.h).
  std::vector<HfPart> parts{{tensor, shape}};
  if (find(tensor).entry == nullptr) parts = hf_parts(arch_, tensor, shape);
  std::vector<float> values;
  for (const HfPart& p : parts) {
    const Found found = find(p.name);
    NTP_RETURN_IF_ERROR(check_stored(found, p.name, p.shape));
    const SafetensorsEntry& e = *found.entry;
    std::vector<std::byte> bytes(e.end - e.begin);
    NTP_RETURN_IF_ERROR(found.file->read(e.begin, bytes));
    std::vector<float> part = to_floats(e.dtype, bytes);
    if (p.scale != 1.0f) {
      for (float& v : part) v /= p.scale;  // a power of 2: exact
    }
    values.insert(values.end(), part.begin(), part.end());
  }
  cached_values_ = std::move(values);
  cached_name_ = tensor;
  cached_shape_ = shape;
  return &cached_values_;
}

Status HfModel::check_stored(const Found& found, const std::string& name,
                             const std::vector<int64_t>& shape) const {
  if (found.entry == nullptr) {
    return invalid_argument((dir_ / weights_).string() + " has no tensor " + name +
                            ", which the model of " + (dir_ / "config.json").string() +
                            " needs; fix config.json or export the model again");
  }
  const SafetensorsEntry* e = found.entry;
  const std::string file = found.file->path().string();
  if (e->shape != shape) {
    return invalid_argument(file + ": tensor " + e->name + " has shape " + shape_text(e->shape) +
                            " but the model of config.json needs " + shape_text(shape) +
                            "; fix config.json or the tensor");
  }
  if (e->dtype != "F32" && e->dtype != "BF16" && e->dtype != "F16") {
    return invalid_argument(file + ": tensor " + e->name + " has dtype " + e->dtype +
                            "; ntp reads F32, BF16 or F16");
  }
  return ok_status();
}

Status HfModel::read(const PieceSpec& request, std::span<float> out) const {
  NTP_RETURN_IF_ERROR(validate_piece_spec(request));
  if (static_cast<int64_t>(out.size()) != local_numel(request)) {
    return invalid_argument(piece_name(request) + ": output holds " + std::to_string(out.size()) +
                            " values, the piece " + std::to_string(local_numel(request)));
  }
  NTP_ASSIGN_OR_RETURN(const std::vector<float>* loaded,
                       load(request.tensor, request.logical_shape));
  const std::vector<float>& whole = *loaded;
  if (request.whole()) {
    std::copy(whole.begin(), whole.end(), out.begin());
    return ok_status();
  }
  // Logical [outer, dim, inner] -> local [outer, index.size(), inner].
  const auto axis = static_cast<size_t>(request.axis);
  int64_t outer = 1, inner = 1;
  for (size_t d = 0; d < axis; ++d) outer *= request.logical_shape[d];
  for (size_t d = axis + 1; d < request.logical_shape.size(); ++d) {
    inner *= request.logical_shape[d];
  }
  const int64_t dim = request.logical_shape[axis];
  const auto n = static_cast<int64_t>(request.index.size());
  for (int64_t o = 0; o < outer; ++o) {
    for (int64_t i = 0; i < n; ++i) {
      const float* src = whole.data() + (o * dim + request.index[static_cast<size_t>(i)]) * inner;
      std::copy(src, src + inner, out.data() + (o * n + i) * inner);
    }
  }
  return ok_status();
}

}  // namespace ntp::checkpoint
