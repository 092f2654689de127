// GPT-2 hyperparameters and the tensor-parallel unit spaces they define.
//
// Unit spaces (what TP splits, in whole units):
//   heads       n_head units; a unit is one head's D = n_embd / n_head columns in each of Q, K, V
//               of c_attn plus the head's D rows of attn.c_proj.weight.
//   ffn units   n_ffn / ffn_unit units; a unit is ffn_unit consecutive columns of mlp.c_fc.weight
//               (and bias) plus the matching rows of mlp.c_proj.weight.
//   vocabulary  vocab_size units; a unit is one row of wte (the tied LM head's matching output).
#pragma once

#include <cstdint>

#include "core/status.h"

namespace ntp::model {

struct GptConfig {
  int64_t n_layer = 2;
  int64_t n_head = 4;
  int64_t n_embd = 64;
  int64_t n_ffn = 0;  // 0 means 4 * n_embd, as in GPT-2
  int64_t n_ctx = 64;
  int64_t vocab_size = 256;  // 256 bytes, optionally padded (rows past 255 are never targets)
  int64_t ffn_unit = 1;      // FFN columns per TP unit

  int64_t head_dim() const { return n_embd / n_head; }
  int64_t ffn() const { return n_ffn == 0 ? 4 * n_embd : n_ffn; }
  int64_t ffn_units() const { return ffn() / ffn_unit; }

  // kInvalidArgument naming the bad field when sizes are not positive or do not divide.
  Status validate() const;
  // Number of logical parameters (tied LM head counted once).
  int64_t num_params() const;
};

}  // namespace ntp::model
