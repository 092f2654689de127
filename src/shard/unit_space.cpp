#include "shard/unit_space.h"

namespace ntp::shard {

Status validate_model_shape(const ModelShape& shape) {
  auto positive = [](const char* flag, std::int64_t v) -> Status {
    if (v > 0) return ok_status();
    return invalid_argument(std::string(flag) + " must be positive, got " + std::to_string(v));
  };
  NTP_RETURN_IF_ERROR(positive("--heads", shape.heads));
  NTP_RETURN_IF_ERROR(positive("--hidden", shape.hidden));
  NTP_RETURN_IF_ERROR(positive("--ffn", shape.ffn));
  NTP_RETURN_IF_ERROR(positive("--ffn-block", shape.ffn_block));
  NTP_RETURN_IF_ERROR(positive("--layers", shape.layers));
  if (shape.vocab < 0) {
    return invalid_argument("--vocab must be positive (or 0 for none), got " +
                            std::to_string(shape.vocab));
  }
  if (shape.kv_heads < 0 || shape.head_dim < 0) {
    return invalid_argument("--kv-heads and the head size must be >= 0");
  }
  if (shape.kv_heads > 0 && shape.heads % shape.kv_heads != 0) {
    return invalid_argument("--heads " + std::to_string(shape.heads) +
                            " is not a multiple of --kv-heads " + std::to_string(shape.kv_heads) +
                            ": every KV head serves the same number of query heads");
  }
  if (shape.experts < 0 || shape.shared_experts < 0 ||
      ((shape.experts > 0 || shape.shared_experts > 0) && shape.kv_heads == 0)) {
    return invalid_argument("--experts " + std::to_string(shape.experts) +
                            " needs a grouped-query (MoE) shape: >= 0, and --kv-heads set");
  }
  if (shape.kv_heads > 0 && shape.vocab == 0) {
    return invalid_argument("a grouped-query shape needs --vocab (its LM head is a unit space)");
  }
  if (shape.head_dim == 0 && shape.hidden % shape.heads != 0) {
    return invalid_argument("--hidden " + std::to_string(shape.hidden) +
                            " is not a multiple of --heads " + std::to_string(shape.heads) +
                            ": every head needs the same width; pick hidden = heads x head size");
  }
  if (shape.ffn % shape.ffn_block != 0) {
    return invalid_argument("--ffn " + std::to_string(shape.ffn) +
                            " is not a multiple of --ffn-block " + std::to_string(shape.ffn_block) +
                            ": pick a block size that divides the FFN width");
  }
  return ok_status();
}

std::vector<UnitSpace> model_unit_spaces(const ModelShape& shape) {
  const std::int64_t head_dim = shape.head_dim > 0 ? shape.head_dim : shape.hidden / shape.heads;
  std::vector<UnitSpace> spaces;
  if (shape.kv_heads > 0) {
    const std::int64_t c = shape.hidden, l = shape.layers;
    spaces.push_back({"heads", shape.heads, l * 2 * head_dim * c});  // q rows, o columns
    if (shape.experts > 0 && shape.shared_experts == 0) {
      spaces.push_back({"ffn", 0, 0, 0});  // no dense FFN: empty, derived (no rank must hold one)
    } else if (shape.experts > 0) {        // the shared experts' columns
      spaces.push_back(
          {"ffn", shape.shared_experts * shape.ffn / shape.ffn_block, l * shape.ffn_block * 3 * c});
    } else {
      spaces.push_back({"ffn", shape.ffn / shape.ffn_block, l * shape.ffn_block * 3 * c});
    }
    spaces.push_back({"vocab", shape.vocab, c});
    spaces.push_back({"kv", shape.kv_heads, l * 2 * head_dim * c, 0,
                      shape.heads / shape.kv_heads});  // k and v rows
    spaces.push_back({"head_rows", shape.vocab, c});
    if (shape.experts > 0) {
      spaces.push_back({"experts", shape.experts, l * 3 * shape.ffn * c});  // w1, w2, w3
    }
    return spaces;
  }
  // Q, K, V columns with biases, plus the head's rows of the output projection.
  spaces.push_back(
      {"heads", shape.heads, shape.layers * (4 * head_dim * shape.hidden + 3 * head_dim)});
  // fc1 columns with biases, plus the matching rows of fc2.
  spaces.push_back({"ffn", shape.ffn / shape.ffn_block,
                    shape.layers * shape.ffn_block * (2 * shape.hidden + 1)});
  if (shape.vocab > 0) spaces.push_back({"vocab", shape.vocab, shape.hidden});
  return spaces;
}

}  // namespace ntp::shard
