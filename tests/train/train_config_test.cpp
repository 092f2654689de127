// ntp train's config check for a model family whose layout holds copies (Llama's KV groups): what
// the trainer supports passes, what it does not yet (live re-formation) is refused with the flag
// to change, and model errors name the field.
#include "train/train_config.h"

#include <gtest/gtest.h>

namespace ntp::train {
namespace {

TrainConfig llama_job() {
  TrainConfig c;
  c.domains = 3;
  c.tp = 4;
  c.failed = {{1, 3}, {2, 2}, {2, 3}};
  c.model.family = model::ModelFamily::kLlama;
  c.model.n_head = 8;
  c.model.n_kv_head = 2;
  c.model.n_embd = 32;
  c.model.ffn_unit = 4;
  c.live_recovery = false;
  return c;
}

std::string error_of(TrainConfig c) {
  const Status s = validate_train_config(c);
  if (s.ok()) return "";
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  return s.message();
}

TEST(TrainConfigTest, LlamaJobsAtMixedDegreesPassAndBadKvHeadsNameThemselves) {
  EXPECT_EQ(error_of(llama_job()), "");
  TrainConfig c = llama_job();
  c.save_dir = "/tmp/x";  // checkpoints: owners write the KV groups, every holder reads them
  EXPECT_EQ(error_of(c), "");
  c = llama_job();
  c.live_recovery = true;  // re-formations move the KV groups' copies too (state_reshard.h)
  c.rebalance = true;
  EXPECT_EQ(error_of(c), "");
  c = llama_job();
  c.model.n_kv_head = 3;
  EXPECT_NE(error_of(c).find("n_kv_head = 3"), std::string::npos);
  EXPECT_NE(error_of(c).find("--kv-heads"), std::string::npos);
}

TEST(TrainConfigTest, GptRefusesLlamaOnlyFieldsAndKeepsItsFlags) {
  TrainConfig c;
  c.model.n_head = 8;
  c.model.n_embd = 32;
  EXPECT_EQ(error_of(c), "");
  c.save_dir = "/tmp/x";  // GPT-2 checkpoints: fine
  EXPECT_EQ(error_of(c), "");
  c.model.n_kv_head = 2;
  EXPECT_NE(error_of(c).find("n_kv_head = 2 is for Llama"), std::string::npos);
}

// --control-plane hierarchy: what its first cut does not do is refused naming the flag, and
// rebalancing (on by default) is turned off rather than refused.
TEST(TrainConfigTest, TheHierarchyRefusesWhatItCannotDoYet) {
  EXPECT_EQ(parse_control_plane("hierarchy").value(), ControlPlane::kHierarchy);
  EXPECT_NE(parse_control_plane("tree").status().message().find("--control-plane"),
            std::string::npos);
  TrainConfig c;
  c.model.n_head = 8;
  c.model.n_embd = 32;
  c.domains = 3;
  c.tp = 4;
  c.control_plane = ControlPlane::kHierarchy;
  EXPECT_EQ(error_of(c), "");
  TrainConfig checked = c;
  ASSERT_TRUE(validate_train_config(checked).ok());
  EXPECT_FALSE(checked.rebalance);
  c.min_tp = 2;
  EXPECT_NE(error_of(c).find("--min-tp 1"), std::string::npos);
  c.min_tp = 1;
  c.domains = 1;
  EXPECT_NE(error_of(c).find("at least 2 domains"), std::string::npos);
  c.domains = 3;
  c.live_recovery = false;
  EXPECT_NE(error_of(c).find("--no-live-recovery"), std::string::npos);
}

}  // namespace
}  // namespace ntp::train
