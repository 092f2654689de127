// train/weight_source.h without processes: the manifest's model_config back to a ModelConfig (the
// inverse of what checkpoints record, both families), and --init-from's adoption of the source's
// model: flags the user did not give follow the source, a given one that disagrees is named with
// both values, ffn_unit stays the run's.
#include <gtest/gtest.h>

#include "model_shapes.h"
#include "train/train_checkpoint.h"
#include "train/weight_source.h"

namespace ntp::train {
namespace {

// The tiny Llama of tests/common/model_shapes.h (its own eps, theta, KV heads and head size).
model::ModelConfig llama() { return model::ModelConfig(testing::tiny_llama()); }

TEST(WeightSourceTest, ModelConfigFromJsonInvertsTheCheckpointsRecord) {
  model::ModelConfig gpt2;
  gpt2.n_layer = 2;
  gpt2.n_head = 8;
  gpt2.n_embd = 64;
  gpt2.ffn_unit = 8;
  for (const model::ModelConfig& m : {gpt2, llama()}) {
    TrainConfig c;
    c.model = m;
    const nlohmann::json recorded = checkpoint_meta(c, 0, 0, {}).model_config;
    Result<model::ModelConfig> back = model_config_from_json(recorded);
    ASSERT_TRUE(back.ok()) << back.status().to_string();
    EXPECT_EQ(*back, m);
  }
  nlohmann::json bad = checkpoint_meta(TrainConfig{}, 0, 0, {}).model_config;
  bad["family"] = "mamba";
  EXPECT_EQ(model_config_from_json(bad).status().message(),
            "model_config.family \"mamba\" is unknown (gpt2, llama, moe)");
  bad.erase("family");
  bad.erase("n_layer");
  EXPECT_EQ(model_config_from_json(bad).status().message(), "model_config.n_layer is missing");
}

TEST(WeightSourceTest, InitFromTakesTheSourceModelAndNamesConflictingFlags) {
  WeightSource source;
  source.dir = "hf-dir";
  source.config = llama();
  source.config.ffn_unit = 1;

  model::ModelConfig run;  // the flags' defaults
  run.ffn_unit = 4;
  ASSERT_TRUE(adopt_source_model(run, source, {}).ok());
  model::ModelConfig want = llama();
  want.ffn_unit = 4;  // the run's TP granularity
  EXPECT_EQ(run, want);

  // Given flags that agree (--kv-heads as resolved: 2) are fine.
  model::ModelConfig agree = llama();
  EXPECT_TRUE(adopt_source_model(agree, source, {"--model", "--heads", "--kv-heads"}).ok());

  model::ModelConfig heads;
  heads.n_head = 8;
  EXPECT_EQ(adopt_source_model(heads, source, {"--heads"}).message(),
            "--heads 8 conflicts with --init-from hf-dir, whose model has --heads 4; drop --heads "
            "(the model comes from the source)");
  model::ModelConfig theta = llama();
  theta.rope_theta = 1e4;
  EXPECT_NE(adopt_source_model(theta, source, {"--rope-theta"})
                .message()
                .find("--rope-theta 10000.0 conflicts with --init-from hf-dir, whose model has "
                      "--rope-theta 100.0"),
            std::string::npos);
  model::ModelConfig ffn = llama();
  ffn.n_ffn = 0;  // 4 x width = 80, the source has 28
  EXPECT_NE(adopt_source_model(ffn, source, {"--ffn"}).message().find("--ffn 80 conflicts"),
            std::string::npos);
}

}  // namespace
}  // namespace ntp::train
