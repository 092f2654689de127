// Importing Hugging Face directories (checkpoint/hf_import.h): config.json back to the
// manifest-form model_config (the inverse of hf_config, defaults resolved), rejections named by
// field, and pieces of a model.safetensors read at any slicing, F32 / BF16 / F16, a tied Llama
// head and GPT-2 names without the "transformer." prefix.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <fstream>

#include "checkpoint/hf_export.h"
#include "checkpoint/hf_import.h"
#include "temp_dir.h"

namespace ntp::checkpoint {
namespace {

using nlohmann::json;
using testing::TempDir;

json llama_model_config() {
  return {{"family", "llama"}, {"n_layer", 2},  {"n_head", 8},          {"n_embd", 32},
          {"n_ffn", 96},       {"n_ctx", 16},   {"vocab_size", 260},    {"ffn_unit", 1},
          {"n_kv_head", 2},    {"head_dim", 4}, {"rms_norm_eps", 1e-5}, {"rope_theta", 5e5}};
}

json moe_model_config() {
  json m = llama_model_config();
  m.update({{"family", "moe"},
            {"n_experts", 4},
            {"top_k", 2},
            {"n_shared_experts", 0},
            {"router_aux_loss_coef", 0.02}});
  return m;
}

json gpt2_model_config() {
  return {{"n_layer", 3}, {"n_head", 4},       {"n_embd", 32}, {"n_ffn", 128},
          {"n_ctx", 16},  {"vocab_size", 256}, {"ffn_unit", 1}};
}

json shared_moe_model_config() {
  json m = moe_model_config();
  m["n_shared_experts"] = 2;
  return m;
}

TEST(HfImportTest, ConfigJsonIsTheInverseOfTheExport) {
  for (const json& m :
       {llama_model_config(), moe_model_config(), shared_moe_model_config(), gpt2_model_config()}) {
    Result<json> hf = hf_config(m);
    ASSERT_TRUE(hf.ok()) << hf.status().to_string();
    Result<json> back = model_config_from_hf(*hf);
    ASSERT_TRUE(back.ok()) << back.status().to_string();
    EXPECT_EQ(*back, m);
  }
  // transformers' defaults: no head_dim (width / heads), no num_key_value_heads (= heads), no
  // rms_norm_eps (1e-6) or rope_theta (1e4); GPT-2's n_inner null (4 x width).
  json hf = *hf_config(llama_model_config());
  for (const char* key : {"head_dim", "num_key_value_heads", "rms_norm_eps", "rope_theta"}) {
    hf.erase(key);
  }
  const json llama = *model_config_from_hf(hf);
  EXPECT_EQ(llama["head_dim"], 4);
  EXPECT_EQ(llama["n_kv_head"], 8);
  EXPECT_EQ(llama["rms_norm_eps"], 1e-6);
  EXPECT_EQ(llama["rope_theta"], 1e4);
  json gpt = *hf_config(gpt2_model_config());
  gpt["n_inner"] = nullptr;
  EXPECT_EQ((*model_config_from_hf(gpt))["n_ffn"], 128);
}

// MixtralForCausalLM: transformers' defaults (num_experts_per_tok 2, router_aux_loss_coef 0.001),
// and what ntp's MoE does not compute is named: router noise, a sliding window shorter than the
// context; shared experts do not export.
TEST(HfImportTest, MixtralConfigsReadWithTransformersDefaultsAndRefuseWhatNtpLacks) {
  const json mixtral = *hf_config(moe_model_config());
  EXPECT_EQ(mixtral["architectures"], json({"MixtralForCausalLM"}));
  EXPECT_EQ(mixtral["num_local_experts"], 4);
  EXPECT_EQ(mixtral["num_experts_per_tok"], 2);
  EXPECT_FALSE(mixtral.contains("mlp_bias"));
  json defaults = mixtral;
  defaults.erase("num_experts_per_tok");
  defaults.erase("router_aux_loss_coef");
  const json m = *model_config_from_hf(defaults);
  EXPECT_EQ(m["top_k"], 2);
  EXPECT_EQ(m["router_aux_loss_coef"], 0.001);
  json window = mixtral;
  window["sliding_window"] = 16;  // the whole context: full attention
  EXPECT_TRUE(model_config_from_hf(window).ok());
  const std::vector<std::pair<json, std::string>> refused = {
      {json{{"router_jitter_noise", 0.1}}, "\"router_jitter_noise\" is 0.1, but ntp's router"},
      {json{{"sliding_window", 8}}, "\"sliding_window\" is 8, shorter than"},
      {json{{"num_local_experts", nullptr}}, "\"num_local_experts\" is missing"}};
  for (const auto& [patch, message] : refused) {
    json c = mixtral;
    c.update(patch);
    const Status s = model_config_from_hf(c).status();
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << patch.dump();
    EXPECT_NE(s.message().find(message), std::string::npos) << s.message();
  }
  json shared = moe_model_config();
  shared["n_shared_experts"] = 1;
  EXPECT_NE(
      hf_mixtral_config(shared).status().message().find("MixtralForCausalLM has no shared experts"),
      std::string::npos);
}

// A MoE with shared experts exports as Qwen2MoeForCausalLM (hf_names.h): one expert's width as
// moe_intermediate_size, the shared experts' as a multiple of it, every layer sparse, top-k
// renormalized; what ntp's MoE does not compute is named on the way back.
TEST(HfImportTest, SharedExpertsExportAsQwen2MoeAndReadBack) {
  const json qwen = *hf_config(shared_moe_model_config());
  EXPECT_EQ(qwen["architectures"], json({"Qwen2MoeForCausalLM"}));
  EXPECT_EQ(qwen["model_type"], "qwen2_moe");
  EXPECT_EQ(qwen["num_experts"], 4);
  EXPECT_EQ(qwen["moe_intermediate_size"], 96);
  EXPECT_EQ(qwen["shared_expert_intermediate_size"], 192);
  EXPECT_EQ(qwen["norm_topk_prob"], true);
  EXPECT_EQ(qwen["decoder_sparse_step"], 1);
  EXPECT_EQ(qwen["qkv_bias"], true);
  const std::vector<std::pair<json, std::string>> refused = {
      {json{{"norm_topk_prob", false}}, "\"norm_topk_prob\" is false, but ntp renormalizes"},
      {json{{"decoder_sparse_step", 2}}, "\"decoder_sparse_step\" is 2, but every ntp MoE layer"},
      {json{{"mlp_only_layers", {1}}}, "\"mlp_only_layers\" is [1], but every ntp MoE layer"},
      {json{{"use_sliding_window", true}}, "\"use_sliding_window\" is true"},
      {json{{"shared_expert_intermediate_size", 100}},
       "\"shared_expert_intermediate_size\" 100 is not a multiple of \"moe_intermediate_size\" "
       "96"}};
  for (const auto& [patch, message] : refused) {
    json c = qwen;
    c.update(patch);
    const Status s = model_config_from_hf(c).status();
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << patch.dump();
    EXPECT_NE(s.message().find(message), std::string::npos) << s.message();
  }
}

TEST(HfImportTest, UnsupportedConfigsAreNamed) {
  const json llama = *hf_config(llama_model_config());
  const json gpt = *hf_config(gpt2_model_config());
  const std::vector<std::pair<json, std::string>> cases = {
      {{{"architectures", {"BertModel"}}},
       "\"architectures\" [\"BertModel\"] is not supported; ntp reads [\"GPT2LMHeadModel\"], "
       "[\"LlamaForCausalLM\"], [\"MixtralForCausalLM\"] or [\"Qwen2MoeForCausalLM\"]"},
      {json{{"num_key_value_heads", 3}},
       "\"num_attention_heads\" 8 is not a multiple of \"num_key_value_heads\" 3"},
      {json{{"rope_scaling", {{"type", "linear"}}}}, "\"rope_scaling\" is {\"type\":\"linear\"}"},
      {json{{"attention_bias", true}}, "\"attention_bias\" is true, but ntp's Llama has no biases"},
      {json{{"hidden_act", "gelu"}}, "\"hidden_act\" is \"gelu\""},
      {json{{"hidden_size", 0}}, "\"hidden_size\" is 0; it must be a positive integer"},
      {json{{"vocab_size", nullptr}}, "\"vocab_size\" is missing"}};
  for (const auto& [patch, message] : cases) {
    json c = llama;
    c.update(patch);
    Result<json> r = model_config_from_hf(c);
    ASSERT_FALSE(r.ok()) << patch.dump();
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(r.status().message().find(message), std::string::npos) << r.status().message();
  }
  json untied = gpt;
  untied["tie_word_embeddings"] = false;
  EXPECT_NE(model_config_from_hf(untied).status().message().find("ties lm_head to wte"),
            std::string::npos);
  json act = gpt;
  act["activation_function"] = "relu";
  EXPECT_NE(model_config_from_hf(act).status().message().find("\"activation_function\" is"),
            std::string::npos);
}

// Writes DIR/config.json and DIR/model.safetensors holding `tensors` of dtype `dtype` (F32 data
// converted: BF16 by truncation, F16 by the exact values used below).
struct HfFixture {
  std::string name;
  std::vector<int64_t> shape;
  std::vector<float> values;
};

void write_hf_dir(const std::filesystem::path& dir, const json& config,
                  const std::vector<HfFixture>& tensors, const std::string& dtype) {
  std::filesystem::create_directories(dir);
  std::ofstream(dir / "config.json") << config.dump();
  json header = json::object();
  std::string data;
  for (const HfFixture& t : tensors) {
    const size_t begin = data.size();
    for (float v : t.values) {
      uint32_t bits;
      std::memcpy(&bits, &v, 4);
      if (dtype == "F32") {
        data.append(reinterpret_cast<const char*>(&bits), 4);
      } else {
        // BF16: the high half; F16 of the small integers used here: sign, exponent + 15, mantissa.
        uint16_t h = static_cast<uint16_t>(bits >> 16);
        if (dtype == "F16") {
          const uint32_t exp = (bits >> 23) & 0xff;
          h = v == 0.0f ? 0
                        : static_cast<uint16_t>(((bits >> 16) & 0x8000u) | ((exp - 112) << 10) |
                                                ((bits >> 13) & 0x3ffu));
        }
        data.append(reinterpret_cast<const char*>(&h), 2);
      }
    }
    header[t.name] = {{"dtype", dtype}, {"shape", t.shape}, {"data_offsets", {begin, data.size()}}};
  }
  std::string text = header.dump();
  while (text.size() % 8 != 0) text += ' ';
  std::ofstream out(dir / "model.safetensors", std::ios::binary);
  const uint64_t n = text.size();
  out.write(reinterpret_cast<const char*>(&n), 8);
  out << text << data;
}

std::vector<float> iota_values(int64_t n, float sign = 1.0f) {
  std::vector<float> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[static_cast<size_t>(i)] = sign * static_cast<float>(i + 1);
  return v;
}

TEST(HfImportTest, ReadsPiecesAtAnySlicingInEveryDtype) {
  TempDir tmp;
  json config = *hf_config(llama_model_config());
  config["tie_word_embeddings"] = true;  // no lm_head.weight: the embedding is read instead
  for (const char* dtype : {"F32", "BF16", "F16"}) {
    const auto dir = tmp.path() / dtype;
    // [260, 32] would need 8320 values; small integers are exact in every dtype.
    write_hf_dir(dir, config,
                 {{"model.embed_tokens.weight", {4, 6}, iota_values(24, -1.0f)},
                  {"model.norm.weight", {6}, iota_values(6)}},
                 dtype);
    Result<HfModel> hf = HfModel::open(dir);
    ASSERT_TRUE(hf.ok()) << hf.status().to_string();
    EXPECT_EQ(hf->model_config(), llama_model_config());
    std::vector<float> rows(12);  // rows 3 and 1 of the tied head
    ASSERT_TRUE(hf->read({"lm_head.weight", "value", {4, 6}, 0, {3, 1}}, rows).ok());
    for (int j = 0; j < 6; ++j) {
      EXPECT_EQ(rows[static_cast<size_t>(j)], -static_cast<float>(18 + j + 1)) << dtype;
      EXPECT_EQ(rows[static_cast<size_t>(6 + j)], -static_cast<float>(6 + j + 1)) << dtype;
    }
    std::vector<float> cols(8);  // columns 5 and 0 of every row
    ASSERT_TRUE(hf->read({"model.embed_tokens.weight", "value", {4, 6}, 1, {5, 0}}, cols).ok());
    for (int r = 0; r < 4; ++r) {
      EXPECT_EQ(cols[static_cast<size_t>(2 * r)], -static_cast<float>(6 * r + 6)) << dtype;
      EXPECT_EQ(cols[static_cast<size_t>(2 * r + 1)], -static_cast<float>(6 * r + 1)) << dtype;
    }
    std::vector<float> whole(6);
    ASSERT_TRUE(hf->read({"model.norm.weight", "value", {6}, -1, {}}, whole).ok());
    EXPECT_EQ(whole, iota_values(6)) << dtype;
    // The wrong shape and a missing tensor are named.
    std::vector<float> seven(7);
    Status bad = hf->read({"model.norm.weight", "value", {7}, -1, {}}, seven);
    EXPECT_NE(bad.message().find("tensor model.norm.weight has shape [6] but the model of "
                                 "config.json needs [7]"),
              std::string::npos)
        << bad.message();
    bad = hf->read({"model.layers.0.mlp.up_proj.weight", "value", {6}, -1, {}}, whole);
    EXPECT_NE(bad.message().find("has no tensor model.layers.0.mlp.up_proj.weight"),
              std::string::npos)
        << bad.message();
  }
}

// Mixtral's per-expert tensors read as ntp's stacked one: slab e is experts.{e}.w1.weight, in
// any piece (here experts 2 and 0, as an expert-parallel rank holding them asks).
TEST(HfImportTest, MixtralPerExpertTensorsReadAsTheStackedTensor) {
  TempDir tmp;
  const std::string stacked = "model.layers.1.block_sparse_moe.experts.w1.weight";
  std::vector<HfFixture> experts;
  for (int e = 0; e < 3; ++e) {
    experts.push_back(
        {"model.layers.1.block_sparse_moe.experts." + std::to_string(e) + ".w1.weight",
         {2, 3},
         iota_values(6, static_cast<float>(e + 1))});
  }
  json config = *hf_config(moe_model_config());
  config["num_local_experts"] = 3;
  write_hf_dir(tmp.path(), config, experts, "BF16");
  Result<HfModel> hf = HfModel::open(tmp.path());
  ASSERT_TRUE(hf.ok()) << hf.status().to_string();
  std::vector<float> piece(12);
  ASSERT_TRUE(hf->read({stacked, "value", {3, 2, 3}, 0, {2, 0}}, piece).ok());
  for (int i = 0; i < 6; ++i) {
    EXPECT_EQ(piece[static_cast<size_t>(i)], 3.0f * static_cast<float>(i + 1));
    EXPECT_EQ(piece[static_cast<size_t>(6 + i)], static_cast<float>(i + 1));
  }
  // A model needing a fourth expert is told which tensor is missing.
  std::vector<float> four(24);
  const Status missing = hf->read({stacked, "value", {4, 2, 3}, -1, {}}, four);
  EXPECT_NE(missing.message().find("has no tensor model.layers.1.block_sparse_moe.experts.3.w1."
                                   "weight"),
            std::string::npos)
      << missing.message();
}

// Qwen2-MoE's stored tensors read as ntp's: per-expert gate/up/down_proj as the stacked w1/w3/w2,
// the shared expert's down_proj halved (the export doubles it against sigmoid(0) = 1/2), the router
// renamed; a nonzero q/k/v bias or shared-expert gate is refused, naming the tensor.
TEST(HfImportTest, Qwen2MoeTensorsReadAsNtpsAndNonzeroBiasesAreRefused) {
  TempDir tmp;
  json config = *hf_config(shared_moe_model_config());
  config["num_experts"] = 2;
  config["num_hidden_layers"] = 1;
  std::vector<HfFixture> tensors = {
      {"model.layers.0.mlp.experts.0.up_proj.weight", {2, 3}, iota_values(6)},
      {"model.layers.0.mlp.experts.1.up_proj.weight", {2, 3}, iota_values(6, -1.0f)},
      {"model.layers.0.mlp.shared_expert.down_proj.weight", {3, 2}, iota_values(6, 2.0f)},
      {"model.layers.0.mlp.gate.weight", {2, 3}, iota_values(6)},
      {"model.layers.0.self_attn.q_proj.bias", {32}, std::vector<float>(32, 0.0f)},
      {"model.layers.0.mlp.shared_expert_gate.weight", {1, 32}, std::vector<float>(32, 0.0f)}};
  write_hf_dir(tmp.path() / "ok", config, tensors, "F32");
  Result<HfModel> hf = HfModel::open(tmp.path() / "ok");
  ASSERT_TRUE(hf.ok()) << hf.status().to_string();
  EXPECT_EQ(hf->model_config()["n_shared_experts"], 2);
  std::vector<float> up(12);
  ASSERT_TRUE(
      hf->read({"model.layers.0.block_sparse_moe.experts.w3.weight", "value", {2, 2, 3}, -1, {}},
               up)
          .ok());
  for (int i = 0; i < 6; ++i) {
    EXPECT_EQ(up[static_cast<size_t>(i)], static_cast<float>(i + 1));
    EXPECT_EQ(up[static_cast<size_t>(6 + i)], -static_cast<float>(i + 1));
  }
  std::vector<float> down(6);
  ASSERT_TRUE(hf->read({"model.layers.0.block_sparse_moe.shared_experts.down_proj.weight",
                        "value",
                        {3, 2},
                        -1,
                        {}},
                       down)
                  .ok());
  EXPECT_EQ(down, iota_values(6));  // stored 2 x (i + 1)
  std::vector<float> router(6);
  ASSERT_TRUE(
      hf->read({"model.layers.0.block_sparse_moe.gate.weight", "value", {2, 3}, -1, {}}, router)
          .ok());
  EXPECT_EQ(router, iota_values(6));

  tensors[4].values[7] = 0.5f;  // a q_proj bias
  write_hf_dir(tmp.path() / "bias", config, tensors, "F32");
  const Status biased = HfModel::open(tmp.path() / "bias").status();
  EXPECT_EQ(biased.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(biased.message().find("tensor model.layers.0.self_attn.q_proj.bias holds 0.5"),
            std::string::npos)
      << biased.message();
}

TEST(HfImportTest, GptNamesWithoutTheTransformerPrefixAreRead) {
  TempDir tmp;
  write_hf_dir(tmp.path(), *hf_config(gpt2_model_config()),
               {{"wte.weight", {2, 3}, iota_values(6)}}, "F32");
  Result<HfModel> hf = HfModel::open(tmp.path());
  ASSERT_TRUE(hf.ok()) << hf.status().to_string();
  std::vector<float> out(6);
  ASSERT_TRUE(hf->read({"transformer.wte.weight", "value", {2, 3}, -1, {}}, out).ok());
  EXPECT_EQ(out, iota_values(6));
  EXPECT_TRUE(HfModel::is_hf_dir(tmp.path()));
}

}  // namespace
}  // namespace ntp::checkpoint

namespace ntp::checkpoint {
namespace {

// transformers' sharded save: model.safetensors.index.json maps each tensor to its file.
TEST(HfImportTest, ShardedSavesAreReadThroughTheirIndex) {
  TempDir tmp;
  const json config = *hf_config(llama_model_config());
  const auto dir = tmp.path() / "hf";
  write_hf_dir(tmp.path() / "a", config, {{"model.norm.weight", {6}, iota_values(6)}}, "F32");
  write_hf_dir(tmp.path() / "b", config, {{"lm_head.weight", {2, 3}, iota_values(6, -1.0f)}},
               "BF16");
  std::filesystem::create_directories(dir);
  std::filesystem::rename(tmp.path() / "a" / "model.safetensors",
                          dir / "model-00001-of-00002.safetensors");
  std::filesystem::rename(tmp.path() / "b" / "model.safetensors",
                          dir / "model-00002-of-00002.safetensors");
  std::filesystem::rename(tmp.path() / "a" / "config.json", dir / "config.json");
  const json index = {{"metadata", {{"total_size", 36}}},
                      {"weight_map",
                       {{"model.norm.weight", "model-00001-of-00002.safetensors"},
                        {"lm_head.weight", "model-00002-of-00002.safetensors"}}}};
  std::ofstream(dir / "model.safetensors.index.json") << index.dump();
  Result<HfModel> hf = HfModel::open(dir);
  ASSERT_TRUE(hf.ok()) << hf.status().to_string();
  std::vector<float> norm(6), head(3);
  ASSERT_TRUE(hf->read({"model.norm.weight", "value", {6}, -1, {}}, norm).ok());
  EXPECT_EQ(norm, iota_values(6));
  ASSERT_TRUE(hf->read({"lm_head.weight", "value", {2, 3}, 0, {1}}, head).ok());
  EXPECT_EQ(head, (std::vector<float>{-4, -5, -6}));
  const Status missing = hf->read({"model.embed_tokens.weight", "value", {2, 3}, 0, {1}}, head);
  EXPECT_NE(missing.message().find("model.safetensors.index.json has no tensor "
                                   "model.embed_tokens.weight"),
            std::string::npos)
      << missing.message();
  // An index naming a file that is not there is named by the file.
  std::ofstream(dir / "model.safetensors.index.json")
      << json{{"weight_map", {{"x", "model-9.safetensors"}}}}.dump();
  EXPECT_NE(HfModel::open(dir).status().message().find("model-9.safetensors"), std::string::npos);
}

}  // namespace
}  // namespace ntp::checkpoint
