// The random inputs the model tests draw: a batch of tokens and targets, and logical weights
// larger than the init (llama_model_test.cpp says why). Both are layout-independent: every rank
// of every layout sees the same batch and the same logical tensors.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/rng.h"
#include "model/param.h"

namespace ntp::model::testdata {

// `n` tokens and `n` targets below `vocab` from `rng`, drawn in pairs (token i, then target i).
inline void random_batch(Rng& rng, int64_t n, int64_t vocab, std::vector<int32_t>& tokens,
                         std::vector<int32_t>& targets) {
  tokens.resize(static_cast<size_t>(n));
  targets.resize(static_cast<size_t>(n));
  for (size_t i = 0; i < tokens.size(); ++i) {
    tokens[i] = static_cast<int32_t>(rng.below(static_cast<uint64_t>(vocab)));
    targets[i] = static_cast<int32_t>(rng.below(static_cast<uint64_t>(vocab)));
  }
}

// Redraws every parameter's logical tensor, the k-th from Rng(seed + k): norm weights
// 1 + 0.3 N(0, 1), the others scale * N(0, 1); each rank takes its elements.
inline void redraw_logical_weights(std::vector<Param>& params, uint64_t seed, double scale) {
  uint64_t k = 0;
  for (Param& p : params) {
    Rng rng(seed + k++);
    const bool norm = p.name.find("norm") != std::string::npos;
    std::vector<float> logical(static_cast<size_t>(shape_numel(p.logical_shape)));
    for (float& v : logical) {
      v = static_cast<float>(norm ? 1.0 + 0.3 * rng.normal() : scale * rng.normal());
    }
    p.gather_from_logical(logical, p.value.span());
  }
}

}  // namespace ntp::model::testdata
