// Deterministic, layout-independent weight initialization.
//
// Every logical element's initial value is a pure function of (seed, tensor name, logical flat
// index): a rank materializes only its own elements and every TP degree, layout or process count
// starts from bit-identical logical weights. Normal draws come from SplitMix64 hashes of the key
// through Box-Muller, computed in double and rounded once to float.
//
// GPT-2 scheme: wte, c_attn, c_fc weights ~ N(0, 0.02); wpe ~ N(0, 0.01); the residual
// projections (attn.c_proj.weight, mlp.c_proj.weight) ~ N(0, 0.02 / sqrt(2 * n_layer));
// biases 0; LayerNorm weight 1, bias 0.
#pragma once

#include <cstdint>
#include <string_view>

#include "model/gpt_config.h"
#include "model/param.h"

namespace ntp::model {

struct InitRule {
  enum class Kind { kNormal, kZeros, kOnes };
  Kind kind = Kind::kZeros;
  double stddev = 0.0;
};

// The rule for a Hugging Face GPT-2 parameter name (checks the name is one of them).
InitRule init_rule_for(const GptConfig& config, std::string_view name);

// Value of logical element `logical_flat` of tensor `name` under `rule`.
float init_value(uint64_t seed, std::string_view name, int64_t logical_flat, const InitRule& rule);

// Fills param.value (local shape) from the logical rule; param.grad is zeroed.
void initialize_param(uint64_t seed, const GptConfig& config, Param& param);

}  // namespace ntp::model
