// The family-neutral model interface (model/model.h) and its factory (model/model_factory.h): a
// model made through the factory is the family's own model, bit for bit (same parameters, same
// initial weights, same loss and gradients through the virtual calls), the config converts to and
// from each family's without loss, and bad input names the field or the flag.
#include "model/model_factory.h"

#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <tuple>

#include "core/rng.h"
#include "model/gpt_model.h"
#include "model/llama_model.h"
#include "model_shapes.h"
#include "random_inputs.h"

namespace ntp::model {
namespace {

constexpr int64_t kB = 2, kT = 6;

GptConfig gpt_config() {
  GptConfig c = testing::tiny_gpt(/*vocab_size=*/31);
  c.n_ffn = 24;
  return c;
}

// gpt_config()'s sizes in a tiny_llama.
LlamaConfig llama_config() {
  LlamaConfig c = testing::tiny_llama();
  c.n_embd = 16;
  c.n_ffn = 24;
  c.vocab_size = 31;
  c.rope_theta = 500.0;
  return c;
}

void make_batch(int64_t vocab, std::vector<int32_t>& tokens, std::vector<int32_t>& targets) {
  Rng rng(3);
  testdata::random_batch(rng, kB * kT, vocab, tokens, targets);
}

bool same_bits(const Tensor& a, const Tensor& b) {
  return a.numel() == b.numel() &&
         std::memcmp(a.data(), b.data(), static_cast<size_t>(a.numel()) * sizeof(float)) == 0;
}

// `made` (through the interface) and `own` (the family's create) must agree bit for bit: names,
// shapes, initial values, then loss, gradients and gradient norm after one forward_backward.
void expect_identical(Model& made, Model& own, int64_t vocab) {
  ASSERT_EQ(made.params().size(), own.params().size());
  for (size_t i = 0; i < own.params().size(); ++i) {
    const Param& a = made.params()[i];
    const Param& b = own.params()[i];
    EXPECT_EQ(a.name, b.name);
    EXPECT_EQ(a.logical_shape, b.logical_shape);
    EXPECT_EQ(a.logical_index, b.logical_index);
    EXPECT_TRUE(same_bits(a.value, b.value)) << a.name;
  }
  EXPECT_EQ(made.grads_ready_order(), own.grads_ready_order());
  std::vector<int32_t> tokens, targets;
  make_batch(vocab, tokens, targets);
  Result<double> la = made.forward_backward(tokens, targets, kB, kT);
  Result<double> lb = own.forward_backward(tokens, targets, kB, kT);
  ASSERT_TRUE(la.ok() && lb.ok());
  EXPECT_EQ(*la, *lb);  // the same code on the same data: exact
  for (size_t i = 0; i < own.params().size(); ++i) {
    EXPECT_TRUE(same_bits(made.params()[i].grad, own.params()[i].grad)) << own.params()[i].name;
  }
  EXPECT_EQ(*made.grad_norm(), *own.grad_norm());
  EXPECT_EQ(*made.loss(tokens, targets, kB, kT), *own.loss(tokens, targets, kB, kT));
  made.zero_grad();
  for (const Param& p : made.params()) {
    for (int64_t e = 0; e < p.grad.numel(); ++e) ASSERT_EQ(p.grad[e], 0.0f) << p.name;
  }
}

TEST(ModelFactoryTest, MakesTheGptModelOfTheShard) {
  const GptConfig c = gpt_config();
  const TpShard own_shard = contiguous_layout(c, 2)[1];
  const ModelShard shard{own_shard.heads, own_shard.ffn_units, own_shard.vocab_rows, {}, {}};
  Result<std::unique_ptr<Model>> made = create_model(c, shard, 7);
  ASSERT_TRUE(made.ok()) << made.status().to_string();
  ASSERT_NE(dynamic_cast<GptModel*>(made->get()), nullptr);
  Result<GptModel> own = GptModel::create(c, own_shard, 7);
  ASSERT_TRUE(own.ok());
  expect_identical(**made, *own, c.vocab_size);
  EXPECT_NE((*made)->find("transformer.wte.weight"), nullptr);
  EXPECT_EQ((*made)->find("lm_head.weight"), nullptr);  // tied: not a parameter
}

TEST(ModelFactoryTest, MakesTheLlamaModelOfTheShard) {
  const LlamaConfig c = llama_config();
  const LlamaShard own_shard = shuffled_layout(c, 3, 9)[2];
  const ModelShard shard{
      own_shard.heads, own_shard.ffn_units, own_shard.vocab_rows, own_shard.head_rows, {}};
  Result<std::unique_ptr<Model>> made = create_model(c, shard, 7);
  ASSERT_TRUE(made.ok()) << made.status().to_string();
  ASSERT_NE(dynamic_cast<LlamaModel*>(made->get()), nullptr);
  Result<LlamaModel> own = LlamaModel::create(c, own_shard, 7);
  ASSERT_TRUE(own.ok());
  // A partial shard's forward_backward needs its peers: compare the code paths on the whole model,
  // and the partial shard's parameters and KV-copy marks below.
  const LlamaShard f = full_shard(c);
  Result<std::unique_ptr<Model>> made_full =
      create_model(c, ModelShard{f.heads, f.ffn_units, f.vocab_rows, f.head_rows, {}}, 7);
  Result<LlamaModel> own_full = LlamaModel::create(c, f, 7);
  ASSERT_TRUE(made_full.ok() && own_full.ok());
  expect_identical(**made_full, *own_full, c.vocab_size);
  // The partial shard: same parameters and KV-copy marks.
  ASSERT_EQ((*made)->params().size(), own->params().size());
  for (size_t i = 0; i < own->params().size(); ++i) {
    EXPECT_EQ((*made)->params()[i].logical_index, own->params()[i].logical_index);
    EXPECT_EQ((*made)->params()[i].unit_copy, own->params()[i].unit_copy);
    EXPECT_TRUE(same_bits((*made)->params()[i].value, own->params()[i].value));
  }
  EXPECT_NE((*made)->find("lm_head.weight"), nullptr);  // untied
}

TEST(ModelFactoryTest, ConfigsRoundTrip) {
  const GptConfig g = gpt_config();
  const ModelConfig mg = g;
  EXPECT_EQ(mg.family, ModelFamily::kGpt2);
  const GptConfig g2 = mg.gpt();
  EXPECT_EQ(
      std::tie(g2.n_layer, g2.n_head, g2.n_embd, g2.n_ffn, g2.n_ctx, g2.vocab_size, g2.ffn_unit),
      std::tie(g.n_layer, g.n_head, g.n_embd, g.n_ffn, g.n_ctx, g.vocab_size, g.ffn_unit));
  EXPECT_EQ(mg.num_params(), g.num_params());
  EXPECT_EQ(training_flops(mg, 3, 8), GptModel::training_flops(g, 3, 8));

  const LlamaConfig l = llama_config();
  const ModelConfig ml = l;
  EXPECT_EQ(ml.family, ModelFamily::kLlama);
  const LlamaConfig l2 = ml.llama();
  EXPECT_EQ(l2.n_kv_head, l.n_kv_head);
  EXPECT_EQ(l2.head_dim, l.head_dim);
  EXPECT_EQ(l2.rms_norm_eps, l.rms_norm_eps);
  EXPECT_EQ(l2.rope_theta, l.rope_theta);
  EXPECT_EQ(ml.num_params(), l.num_params());
  EXPECT_EQ(training_flops(ml, 3, 8), LlamaModel::training_flops(l, 3, 8));

  ModelConfig mha = ml;
  mha.n_kv_head = 0;  // unset: one KV head per query head
  EXPECT_EQ(mha.llama().n_kv_head, l.n_head);
}

TEST(ModelFactoryTest, BadInputNamesTheFieldOrFlag) {
  ModelConfig g = gpt_config();
  EXPECT_TRUE(g.validate().ok());
  g.n_kv_head = 2;
  EXPECT_NE(g.validate().message().find("n_kv_head = 2 is for Llama"), std::string::npos);
  g = gpt_config();
  g.rope_theta = 5e5;
  EXPECT_NE(g.validate().message().find("rope_theta"), std::string::npos);

  ModelConfig l = llama_config();
  EXPECT_TRUE(l.validate().ok());
  l.n_kv_head = 3;
  EXPECT_NE(l.validate().message().find("n_kv_head"), std::string::npos);
  EXPECT_EQ(create_model(l, ModelShard{}, 1).status().code(), StatusCode::kInvalidArgument);

  const GptConfig gc = gpt_config();
  const TpShard full = full_shard(gc);
  const ModelShard with_head_rows{full.heads, full.ffn_units, full.vocab_rows, {0}, {}};
  EXPECT_NE(create_model(gc, with_head_rows, 1).status().message().find("tied"), std::string::npos);

  EXPECT_EQ(*parse_model_family("llama"), ModelFamily::kLlama);
  EXPECT_EQ(*parse_model_family("gpt2"), ModelFamily::kGpt2);
  EXPECT_NE(parse_model_family("mistral").status().message().find("--model 'mistral'"),
            std::string::npos);
  EXPECT_STREQ(model_family_name(ModelFamily::kLlama), "llama");
}

}  // namespace
}  // namespace ntp::model
