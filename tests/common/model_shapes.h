// Small model shapes shared by the model, checkpoint and trainer tests: a test starts from a named
// shape and sets only what it changes. The values are load-bearing (the tests' parameter counts,
// layouts, tolerances and expected losses follow from them): add a shape rather than edit one.
#pragma once

#include <cstdint>

#include "model/gpt_config.h"
#include "model/llama_config.h"
#include "shard/unit_space.h"

namespace ntp::testing {

// A tiny GPT-2 with the caller's vocabulary: 2 layers, 4 heads of width 4, context 8, FFN units of
// 2 columns (32 units).
inline model::GptConfig tiny_gpt(int64_t vocab_size) {
  return {
      .n_layer = 2, .n_head = 4, .n_embd = 16, .n_ctx = 8, .vocab_size = vocab_size, .ffn_unit = 2};
}

// A tiny Llama whose projections are not square: 2 layers, 4 query heads in 2 KV groups of head
// size 6 (n_head * head_dim = 24 != n_embd = 20), FFN 28 in units of 2, context 8, vocabulary 37,
// RMSNorm epsilon 1e-6, RoPE theta 100 (fast rotation at these short positions).
inline model::LlamaConfig tiny_llama() {
  return {.n_layer = 2,
          .n_head = 4,
          .n_kv_head = 2,
          .n_embd = 20,
          .head_dim = 6,
          .n_ffn = 28,
          .n_ctx = 8,
          .vocab_size = 37,
          .ffn_unit = 2,
          .rms_norm_eps = 1e-6,
          .rope_theta = 100.0};
}

// The parity shape: 2 layers, 8 heads of width 4, context 16, 32 FFN units of 4 columns, 256
// vocabulary rows, in a GptConfig, LlamaConfig or ModelConfig; the family's own fields (Llama's KV
// heads) are the caller's.
template <typename Config>
Config parity_shape() {
  Config c;
  c.n_layer = 2;
  c.n_head = 8;
  c.n_embd = 32;
  c.n_ctx = 16;
  c.ffn_unit = 4;  // 32 FFN units
  c.vocab_size = 256;
  return c;
}

// The parity shape as a Llama with its 8 query heads in 2 KV groups (4 query heads each).
inline model::LlamaConfig parity_llama() {
  model::LlamaConfig c = parity_shape<model::LlamaConfig>();
  c.n_kv_head = 2;
  return c;
}

// The Llama of the TP parity tests of the model (threads and processes, dense and MoE):
// parity_llama with RoPE theta 500 and the caller's FFN width and vocabulary.
inline model::LlamaConfig tp_parity_llama(int64_t n_ffn, int64_t vocab_size) {
  model::LlamaConfig c = parity_llama();
  c.n_ffn = n_ffn;
  c.vocab_size = vocab_size;
  c.rope_theta = 500.0;
  return c;
}

// A MoE model's shape for layout tests (shard::ModelShape): 8 query heads in 4 KV groups, width 64,
// FFN blocks of 8 columns of an expert 32 wide, vocabulary 64, 2 layers, 8 routed experts (the
// last unit space).
inline shard::ModelShape tiny_moe_shape() {
  return {.heads = 8,
          .hidden = 64,
          .ffn = 32,
          .ffn_block = 8,
          .vocab = 64,
          .layers = 2,
          .kv_heads = 4,
          .experts = 8};
}

}  // namespace ntp::testing
