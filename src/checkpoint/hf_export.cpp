#include "checkpoint/hf_export.h"

#include <unistd.h>

#include <system_error>
#include <vector>

#include "checkpoint/atomic_file.h"
#include "checkpoint/hf_names.h"
#include "checkpoint/reader.h"
#include "checkpoint/safetensors.h"

namespace ntp::checkpoint {
namespace fs = std::filesystem;
namespace {

using nlohmann::json;

Result<int64_t> positive_field(const json& config, const char* name, bool zero_ok = false) {
  if (!config.contains(name) || !config[name].is_number_integer() ||
      config[name].get<int64_t>() < (zero_ok ? 0 : 1)) {
    return invalid_argument(std::string("model_config.") + name + " must be a " +
                            (zero_ok ? "non-negative" : "positive") + " integer");
  }
  return config[name].get<int64_t>();
}

// The fields every family's model_config holds, each a positive integer.
struct CommonShape {
  int64_t n_layer = 0, n_head = 0, n_embd = 0, n_ctx = 0, vocab = 0;
};

Result<CommonShape> common_shape(const json& model_config) {
  if (!model_config.is_object()) return invalid_argument("model_config must be a JSON object");
  CommonShape s;
  NTP_ASSIGN_OR_RETURN(s.n_layer, positive_field(model_config, "n_layer"));
  NTP_ASSIGN_OR_RETURN(s.n_head, positive_field(model_config, "n_head"));
  NTP_ASSIGN_OR_RETURN(s.n_embd, positive_field(model_config, "n_embd"));
  NTP_ASSIGN_OR_RETURN(s.n_ctx, positive_field(model_config, "n_ctx"));
  NTP_ASSIGN_OR_RETURN(s.vocab, positive_field(model_config, "vocab_size"));
  return s;
}

// Removes the staging directory unless released.
struct StagingDir {
  fs::path path;
  bool keep = false;
  ~StagingDir() {
    std::error_code ec;
    if (!keep && !path.empty()) fs::remove_all(path, ec);
  }
};

Status fs_error(const std::string& what, const fs::path& path, const std::error_code& ec) {
  return internal_error(what + " " + path.string() + ": " + ec.message());
}

}  // namespace

Result<json> hf_gpt2_config(const json& model_config) {
  NTP_ASSIGN_OR_RETURN(const CommonShape shape, common_shape(model_config));
  const auto [n_layer, n_head, n_embd, n_ctx, vocab] = shape;
  int64_t n_ffn = 0;
  if (model_config.contains("n_ffn")) {
    NTP_ASSIGN_OR_RETURN(n_ffn, positive_field(model_config, "n_ffn", /*zero_ok=*/true));
  }
  if (n_ffn == 0) n_ffn = 4 * n_embd;
  return json{{"architectures", {"GPT2LMHeadModel"}},
              {"model_type", "gpt2"},
              {"vocab_size", vocab},
              {"n_positions", n_ctx},
              {"n_ctx", n_ctx},
              {"n_embd", n_embd},
              {"n_layer", n_layer},
              {"n_head", n_head},
              {"n_inner", n_ffn},
              {"activation_function", "gelu_new"},
              {"layer_norm_epsilon", 1e-5},
              {"initializer_range", 0.02},
              {"resid_pdrop", 0.0},
              {"embd_pdrop", 0.0},
              {"attn_pdrop", 0.0},
              {"scale_attn_weights", true},
              {"tie_word_embeddings", true},
              {"use_cache", true},
              // Byte-level vocabulary: no BOS/EOS token; ids 256.. are padding, never produced.
              {"bos_token_id", nullptr},
              {"eos_token_id", nullptr},
              {"torch_dtype", "float32"},
              {"ntp_tokenizer", "bytes: token id = byte value (0..255); ids >= 256 are padding"}};
}

Result<json> hf_llama_config(const json& model_config) {
  NTP_ASSIGN_OR_RETURN(const CommonShape shape, common_shape(model_config));
  const auto [n_layer, n_head, n_embd, n_ctx, vocab] = shape;
  NTP_ASSIGN_OR_RETURN(int64_t n_ffn, positive_field(model_config, "n_ffn", /*zero_ok=*/true));
  NTP_ASSIGN_OR_RETURN(int64_t n_kv, positive_field(model_config, "n_kv_head", true));
  NTP_ASSIGN_OR_RETURN(int64_t head_dim, positive_field(model_config, "head_dim", true));
  for (const char* name : {"rms_norm_eps", "rope_theta"}) {
    if (!model_config.contains(name) || !model_config[name].is_number() ||
        !(model_config[name].get<double>() > 0.0)) {
      return invalid_argument(std::string("model_config.") + name + " must be a positive number");
    }
  }
  if (n_ffn == 0) n_ffn = 4 * n_embd;
  if (n_kv == 0) n_kv = n_head;
  if (head_dim == 0) head_dim = n_embd / n_head;
  if (n_head % n_kv != 0) {
    return invalid_argument("model_config.n_head " + std::to_string(n_head) +
                            " is not a multiple of n_kv_head " + std::to_string(n_kv));
  }
  return json{{"architectures", {"LlamaForCausalLM"}},
              {"model_type", "llama"},
              {"vocab_size", vocab},
              {"hidden_size", n_embd},
              {"intermediate_size", n_ffn},
              {"num_hidden_layers", n_layer},
              {"num_attention_heads", n_head},
              {"num_key_value_heads", n_kv},
              {"head_dim", head_dim},
              {"hidden_act", "silu"},
              {"max_position_embeddings", n_ctx},
              {"rms_norm_eps", model_config["rms_norm_eps"].get<double>()},
              {"rope_theta", model_config["rope_theta"].get<double>()},
              {"rope_scaling", nullptr},
              {"attention_bias", false},
              {"attention_dropout", 0.0},
              {"mlp_bias", false},
              {"tie_word_embeddings", false},
              {"initializer_range", 0.02},
              {"use_cache", true},
              {"bos_token_id", nullptr},
              {"eos_token_id", nullptr},
              {"torch_dtype", "float32"},
              {"ntp_tokenizer", "bytes: token id = byte value (0..255); ids >= 256 are padding"}};
}

namespace {

// The MoE fields of a manifest's model_config, checked.
struct MoeFields {
  int64_t n_experts = 0, top_k = 0, n_shared = 0;
  double aux_coef = 0.0;
};

Result<MoeFields> moe_fields(const json& model_config) {
  MoeFields f;
  NTP_ASSIGN_OR_RETURN(f.n_experts, positive_field(model_config, "n_experts"));
  NTP_ASSIGN_OR_RETURN(f.top_k, positive_field(model_config, "top_k"));
  NTP_ASSIGN_OR_RETURN(f.n_shared,
                       positive_field(model_config, "n_shared_experts", /*zero_ok=*/true));
  if (f.top_k > f.n_experts) {
    return invalid_argument("model_config.top_k " + std::to_string(f.top_k) +
                            " is larger than n_experts " + std::to_string(f.n_experts));
  }
  if (!model_config.contains("router_aux_loss_coef") ||
      !model_config["router_aux_loss_coef"].is_number()) {
    return invalid_argument("model_config.router_aux_loss_coef must be a number");
  }
  f.aux_coef = model_config["router_aux_loss_coef"].get<double>();
  return f;
}

// Llama's config.json made a MoE one: what Mixtral and Qwen2-MoE share.
void set_moe_common(json& config, const MoeFields& f, const char* architecture,
                    const char* model_type) {
  config["architectures"] = {architecture};
  config["model_type"] = model_type;
  for (const char* llama_only : {"attention_bias", "mlp_bias"}) config.erase(llama_only);
  config["num_experts_per_tok"] = f.top_k;
  config["router_aux_loss_coef"] = f.aux_coef;
  config["output_router_logits"] = false;  // transformers' default; the loss then is CE only
  config["sliding_window"] = nullptr;
}

// HfArch of a manifest's model_config (the family; a MoE with shared experts is Qwen2-MoE).
HfArch hf_arch(const json& model_config) {
  const std::string family = model_config.is_object() && model_config.contains("family") &&
                                     model_config["family"].is_string()
                                 ? model_config["family"].get<std::string>()
                                 : "gpt2";
  if (family == "llama") return HfArch::kLlama;
  if (family != "moe") return HfArch::kGpt2;
  return model_config.value("n_shared_experts", int64_t{0}) > 0 ? HfArch::kQwen2Moe
                                                                : HfArch::kMixtral;
}

}  // namespace

Result<json> hf_mixtral_config(const json& model_config) {
  NTP_ASSIGN_OR_RETURN(json config, hf_llama_config(model_config));
  NTP_ASSIGN_OR_RETURN(const MoeFields f, moe_fields(model_config));
  if (f.n_shared != 0) {
    return invalid_argument("model_config.n_shared_experts is " + std::to_string(f.n_shared) +
                            ": MixtralForCausalLM has no shared experts (hf_qwen2_moe_config "
                            "writes a MoE with shared experts)");
  }
  set_moe_common(config, f, "MixtralForCausalLM", "mixtral");
  config["num_local_experts"] = f.n_experts;
  config["router_jitter_noise"] = 0.0;
  return config;
}

Result<json> hf_qwen2_moe_config(const json& model_config) {
  NTP_ASSIGN_OR_RETURN(json config, hf_llama_config(model_config));
  NTP_ASSIGN_OR_RETURN(const MoeFields f, moe_fields(model_config));
  if (f.n_shared < 1) {
    return invalid_argument(
        "model_config.n_shared_experts is 0: a MoE without shared experts "
        "exports as MixtralForCausalLM");
  }
  const int64_t ffn = config["intermediate_size"].get<int64_t>();  // one expert's width
  set_moe_common(config, f, "Qwen2MoeForCausalLM", "qwen2_moe");
  config["num_experts"] = f.n_experts;
  config["moe_intermediate_size"] = ffn;
  config["shared_expert_intermediate_size"] = f.n_shared * ffn;
  config["intermediate_size"] = f.n_shared * ffn;  // dense layers' width: no layer is dense
  config["norm_topk_prob"] = true;                 // ntp renormalizes the top-k weights
  config["decoder_sparse_step"] = 1;
  config["mlp_only_layers"] = json::array();
  config["qkv_bias"] = true;  // stored as zeros (hf_names.h)
  config["use_sliding_window"] = false;
  config["max_window_layers"] = config["num_hidden_layers"];
  return config;
}

Result<json> hf_config(const json& model_config) {
  const std::string family = model_config.is_object() && model_config.contains("family") &&
                                     model_config["family"].is_string()
                                 ? model_config["family"].get<std::string>()
                                 : "gpt2";
  if (family == "gpt2") return hf_gpt2_config(model_config);
  if (family == "llama") return hf_llama_config(model_config);
  if (family == "moe") {
    return hf_arch(model_config) == HfArch::kQwen2Moe ? hf_qwen2_moe_config(model_config)
                                                      : hf_mixtral_config(model_config);
  }
  return invalid_argument("model_config.family '" + family +
                          "' has no Hugging Face export (gpt2, llama or moe)");
}

Result<ConsolidateSummary> consolidate_to_hf(const fs::path& checkpoint_dir,
                                             const fs::path& out_dir,
                                             const ConsolidateOptions& options) {
  std::error_code ec;
  const bool out_exists = fs::exists(out_dir, ec);
  if (out_exists) {
    if (!fs::is_directory(out_dir, ec)) {
      return invalid_argument("--out " + out_dir.string() + " exists and is not a directory");
    }
    if (!fs::is_empty(out_dir, ec) && !options.force) {
      return invalid_argument("--out " + out_dir.string() +
                              " is not empty; choose a new directory or pass --force");
    }
  }
  NTP_ASSIGN_OR_RETURN(const CheckpointReader reader, CheckpointReader::open(checkpoint_dir));
  const Manifest& m = reader.manifest();
  Result<json> config = hf_config(m.meta.model_config);
  if (!config.ok()) {
    return invalid_argument((reader.step_dir() / "manifest.json").string() + ": " +
                            config.status().message());
  }
  // Each logical tensor is read whole and written as its parts (hf_names.h: one tensor, or one
  // per expert slab, renamed and scaled as the architecture stores them), in the same order, then
  // the tensors the architecture has and ntp's model does not, as zeros.
  const HfArch arch = hf_arch(m.meta.model_config);
  std::vector<SafetensorsTensor> logical, tensors;
  for (const TensorInfo& t : m.tensors) {
    if (!reader.has(t.name, "value")) continue;
    logical.push_back({t.name, t.shape});
    for (const HfPart& part : hf_parts(arch, t.name, t.shape)) {
      tensors.push_back({part.name, part.shape});
    }
  }
  const std::vector<HfPart> zeros = hf_zero_tensors(arch, m.meta.model_config);
  for (const HfPart& z : zeros) tensors.push_back({z.name, z.shape});
  if (tensors.empty()) {
    return invalid_argument(reader.step_dir().string() + ": checkpoint holds no \"value\" tensor");
  }

  fs::path parent = out_dir.parent_path();
  if (parent.empty()) parent = ".";
  fs::create_directories(parent, ec);
  StagingDir staging{parent /
                     (".tmp." + out_dir.filename().string() + "." + std::to_string(::getpid()))};
  fs::remove_all(staging.path, ec);
  if (!fs::create_directory(staging.path, ec)) {
    return fs_error("cannot create", staging.path, ec);
  }
  ConsolidateSummary summary;
  summary.step = m.meta.step;
  NTP_ASSIGN_OR_RETURN(
      SafetensorsWriter writer,
      SafetensorsWriter::create(staging.path / "model.safetensors", tensors,
                                {{"format", "pt"}, {"ntp_step", std::to_string(m.meta.step)}}));
  std::vector<float> buffer;
  for (const SafetensorsTensor& t : logical) {
    PieceSpec whole{t.name, "value", t.shape, -1, {}};
    buffer.resize(static_cast<size_t>(local_numel(whole)));
    NTP_RETURN_IF_ERROR(reader.read(whole, buffer));
    size_t at = 0;
    for (const HfPart& part : hf_parts(arch, t.name, t.shape)) {
      const auto size = static_cast<size_t>(part.numel());
      std::vector<float> values(buffer.begin() + static_cast<long>(at),
                                buffer.begin() + static_cast<long>(at + size));
      if (part.scale != 1.0f) {
        for (float& v : values) v *= part.scale;  // a power of 2: exact
      }
      NTP_RETURN_IF_ERROR(writer.write(values));
      summary.tensors += 1;
      at += size;
    }
    summary.bytes += static_cast<int64_t>(buffer.size() * sizeof(float));
  }
  for (const HfPart& z : zeros) {
    NTP_RETURN_IF_ERROR(writer.write(std::vector<float>(static_cast<size_t>(z.numel()), 0.0f)));
    summary.tensors += 1;
  }
  NTP_RETURN_IF_ERROR(writer.commit());
  NTP_RETURN_IF_ERROR(write_file_atomically(staging.path / "config.json", config->dump(2) + "\n"));

  if (!out_exists || fs::is_empty(out_dir, ec)) {
    // rename(2) replaces an empty directory atomically.
    fs::rename(staging.path, out_dir, ec);
    if (ec) return fs_error("cannot move the result to", out_dir, ec);
    staging.keep = true;
  } else {
    for (const char* name : {"model.safetensors", "config.json"}) {
      fs::rename(staging.path / name, out_dir / name, ec);
      if (ec) return fs_error("cannot move the result to", out_dir / name, ec);
    }
    NTP_RETURN_IF_ERROR(fsync_directory(out_dir));
  }
  NTP_RETURN_IF_ERROR(fsync_directory(parent));
  return summary;
}

}  // namespace ntp::checkpoint
