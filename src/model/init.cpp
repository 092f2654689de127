#include "model/init.h"

#include <cmath>
#include <numbers>

#include "core/check.h"
#include "core/rng.h"

namespace ntp::model {
namespace {

bool ends_with(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

// FNV-1a: a stable 64-bit hash of the name (std::hash is not specified across platforms).
uint64_t name_hash(std::string_view name) {
  uint64_t h = 0xcbf29ce484222325ULL;
  for (char c : name) {
    h ^= static_cast<unsigned char>(c);
    h *= 0x100000001b3ULL;
  }
  return h;
}

double unit_open(uint64_t bits) {
  // (0, 1): 53 random bits, shifted off zero so log() is finite.
  return (static_cast<double>(bits >> 11) + 0.5) * (1.0 / 9007199254740992.0);
}

}  // namespace

InitRule init_rule_for(const GptConfig& config, std::string_view name) {
  using Kind = InitRule::Kind;
  if (ends_with(name, ".bias")) return {Kind::kZeros, 0.0};
  if (name.find("ln_") != std::string_view::npos) return {Kind::kOnes, 0.0};
  if (name == "transformer.wpe.weight") return {Kind::kNormal, 0.01};
  if (ends_with(name, "c_proj.weight")) {
    return {Kind::kNormal, 0.02 / std::sqrt(2.0 * static_cast<double>(config.n_layer))};
  }
  NTP_CHECK_MSG(ends_with(name, ".weight"), "not a GPT-2 parameter name");
  return {Kind::kNormal, 0.02};
}

float init_value(uint64_t seed, std::string_view name, int64_t logical_flat, const InitRule& rule) {
  switch (rule.kind) {
    case InitRule::Kind::kZeros:
      return 0.0f;
    case InitRule::Kind::kOnes:
      return 1.0f;
    case InitRule::Kind::kNormal:
      break;
  }
  const uint64_t key = splitmix64(seed ^ splitmix64(name_hash(name)));
  const uint64_t idx = static_cast<uint64_t>(logical_flat);
  const double u1 = unit_open(splitmix64(key + 2 * idx));
  const double u2 = unit_open(splitmix64(key + 2 * idx + 1));
  const double z = std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * std::numbers::pi * u2);
  return static_cast<float>(z * rule.stddev);
}

void initialize_param(uint64_t seed, const GptConfig& config, Param& param) {
  const InitRule rule = init_rule_for(config, param.name);
  param.value = Tensor(param.local_shape());
  param.grad = Tensor(param.local_shape());
  for (int64_t i = 0; i < param.value.numel(); ++i) {
    param.value[i] = init_value(seed, param.name, param.logical_offset(i), rule);
  }
}

}  // namespace ntp::model
