// The Hugging Face config.json a consolidation writes, by the checkpoint's model family: a Llama
// model_config (what train_checkpoint.cpp records) maps to LlamaForCausalLM's fields with the
// defaults resolved; a GPT-2 one (no family key) to GPT2LMHeadModel as before; bad fields are
// named.
#include <gtest/gtest.h>

#include "checkpoint/hf_export.h"

namespace ntp::checkpoint {
namespace {

nlohmann::json llama_model_config() {
  return {{"family", "llama"}, {"n_layer", 2},  {"n_head", 8},          {"n_embd", 32},
          {"n_ffn", 0},        {"n_ctx", 16},   {"vocab_size", 256},    {"ffn_unit", 4},
          {"n_kv_head", 2},    {"head_dim", 0}, {"rms_norm_eps", 1e-5}, {"rope_theta", 5e5}};
}

TEST(HfConfigTest, LlamaCheckpointsExportLlamaForCausalLM) {
  Result<nlohmann::json> c = hf_config(llama_model_config());
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  EXPECT_EQ((*c)["architectures"][0], "LlamaForCausalLM");
  EXPECT_EQ((*c)["model_type"], "llama");
  EXPECT_EQ((*c)["hidden_size"], 32);
  EXPECT_EQ((*c)["intermediate_size"], 128);  // n_ffn 0: 4 x width
  EXPECT_EQ((*c)["num_hidden_layers"], 2);
  EXPECT_EQ((*c)["num_attention_heads"], 8);
  EXPECT_EQ((*c)["num_key_value_heads"], 2);
  EXPECT_EQ((*c)["head_dim"], 4);  // head_dim 0: width / heads
  EXPECT_EQ((*c)["max_position_embeddings"], 16);
  EXPECT_EQ((*c)["rms_norm_eps"], 1e-5);
  EXPECT_EQ((*c)["rope_theta"], 5e5);
  EXPECT_EQ((*c)["tie_word_embeddings"], false);
  EXPECT_EQ((*c)["attention_bias"], false);
  EXPECT_EQ((*c)["mlp_bias"], false);
  EXPECT_EQ((*c)["hidden_act"], "silu");

  nlohmann::json mha = llama_model_config();
  mha["n_kv_head"] = 0;  // one KV head per query head
  EXPECT_EQ((*hf_config(mha))["num_key_value_heads"], 8);
}

TEST(HfConfigTest, GptCheckpointsStillExportGpt2AndBadFieldsAreNamed) {
  nlohmann::json gpt = llama_model_config();
  for (const char* k : {"family", "n_kv_head", "head_dim", "rms_norm_eps", "rope_theta"}) {
    gpt.erase(k);
  }
  Result<nlohmann::json> c = hf_config(gpt);
  ASSERT_TRUE(c.ok());
  EXPECT_EQ((*c)["architectures"][0], "GPT2LMHeadModel");
  EXPECT_EQ(*c, *hf_gpt2_config(gpt));

  nlohmann::json bad = llama_model_config();
  bad["n_kv_head"] = 3;
  EXPECT_NE(hf_config(bad).status().message().find("n_kv_head 3"), std::string::npos);
  bad = llama_model_config();
  bad.erase("rope_theta");
  EXPECT_NE(hf_config(bad).status().message().find("model_config.rope_theta"), std::string::npos);
  bad = llama_model_config();
  bad["family"] = "mamba";
  EXPECT_NE(hf_config(bad).status().message().find("'mamba'"), std::string::npos);
}

}  // namespace
}  // namespace ntp::checkpoint
